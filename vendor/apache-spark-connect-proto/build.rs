use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // smelt: the `protoc` of the `protoc-bin-vendored` crate unless `PROTOC` names one, so
    // that building smelt needs no protoc installed on the machine.
    println!("cargo:rerun-if-env-changed=PROTOC");
    if std::env::var_os("PROTOC").is_none() {
        std::env::set_var("PROTOC", protoc_bin_vendored::protoc_bin_path()?);
    }
    // smelt: read at run time, not baked in with `env!`: a build script compiled for one
    // clone is reused by another clone sharing the target dir (CI), and must not read the
    // first clone's files.
    let proto_root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?).join("proto");
    let connect_dir = proto_root.join("spark").join("connect");

    // The vendored Spark Connect .proto files. Keep in sync with proto/PROTO_VERSION.txt.
    let protos = [
        "base",
        "catalog",
        "commands",
        "common",
        "expressions",
        "ml",
        "ml_common",
        "pipelines",
        "relations",
        "types",
    ]
    .iter()
    .map(|f| connect_dir.join(format!("{f}.proto")))
    .collect::<Vec<_>>();

    for p in &protos {
        println!("cargo:rerun-if-changed={}", p.display());
    }

    tonic_prost_build::configure()
        .build_server(false)
        .build_client(true)
        .bytes(".")
        .compile_protos(&protos, &[proto_root])?;

    Ok(())
}
