//! Helpers shared by the CLI tests: a temp project with the product2 example files.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use assert_cmd::Command;
use serde_json::Value;

/// A temp folder holding a copy of an example (without its lake); commands run in it.
pub struct Project {
    pub dir: tempfile::TempDir,
    /// The example's folder inside `dir`.
    root: PathBuf,
}

/// Copies the files (not the lake) of `examples/<name>` into `<to>/<name>`.
fn copy_example(name: &str, to: &Path) -> PathBuf {
    let example = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples")
        .join(name);
    let root = to.join(name);
    std::fs::create_dir_all(&root).unwrap();
    for entry in std::fs::read_dir(&example).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_file() {
            std::fs::copy(entry.path(), root.join(entry.file_name())).unwrap();
        }
    }
    root
}

impl Project {
    /// `examples/product2`.
    pub fn product2() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let root = copy_example("product2", dir.path());
        Self { dir, root }
    }

    /// `examples/product2_deletes` (next to the product2 files it uses).
    pub fn product2_deletes() -> Self {
        let dir = tempfile::tempdir().unwrap();
        copy_example("product2", dir.path());
        let root = copy_example("product2_deletes", dir.path());
        Self { dir, root }
    }

    /// `examples/<name>` (its files, not its lake).
    pub fn example(name: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let root = copy_example(name, dir.path());
        Self { dir, root }
    }

    /// An empty project folder, with `smelt.yaml` as given.
    pub fn with_pipeline(yaml: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("project");
        std::fs::create_dir_all(&root).unwrap();
        let p = Self { dir, root };
        p.write("smelt.yaml", yaml);
        p
    }

    /// `examples/tpch_part`.
    pub fn tpch_part() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let root = copy_example("tpch_part", dir.path());
        std::fs::create_dir_all(root.join("silver")).unwrap();
        let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/tpch_part");
        std::fs::copy(
            example.join("silver/part.sql"),
            root.join("silver/part.sql"),
        )
        .unwrap();
        Self { dir, root }
    }

    /// The example's folder (where commands run).
    pub fn path(&self) -> &Path {
        &self.root
    }

    pub fn file(&self, name: &str) -> PathBuf {
        self.root.join(name)
    }

    pub fn write(&self, name: &str, text: &str) {
        self.write_bytes(name, text.as_bytes());
    }

    /// Writes a file (creating its folders).
    pub fn write_bytes(&self, name: &str, bytes: &[u8]) {
        let path = self.file(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, bytes).unwrap();
    }

    /// `smelt` in the project folder, with no failpoint set.
    pub fn smelt(&self) -> Command {
        let mut c = Command::cargo_bin("smelt").unwrap();
        c.current_dir(self.path())
            .env_remove("SMELT_FAILPOINT")
            .env_remove("SMELT_LAKE")
            .env_remove("SMELT_PIPELINE")
            .env_remove("SMELT_SPARK_REMOTE");
        c
    }

    /// Runs `smelt <args>` with more environment `env`, whatever its end.
    fn output_with(&self, env: &[(&str, String)], args: &[&str]) -> std::process::Output {
        self.smelt()
            .args(args)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .output()
            .unwrap()
    }

    /// Runs `smelt <args>` and requires success; returns stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        self.ok_with(&[], args)
    }

    /// [`Project::ok`] with more environment (a storage server's endpoint and keys).
    pub fn ok_with(&self, env: &[(&str, String)], args: &[&str]) -> String {
        let out = self.output_with(env, args);
        assert!(
            out.status.success(),
            "smelt {args:?} failed ({:?}):\nstdout:\n{}\nstderr:\n{}",
            out.status.code(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// The per-flow reports of `smelt --json <args>` (a run or plan, which must succeed).
    pub fn flows(&self, args: &[&str]) -> Vec<Value> {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        let out = self.ok(&all);
        let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
        v["flows"].as_array().unwrap().clone()
    }

    /// Runs `smelt <args>`, requires exit code `code`; returns (stdout, stderr).
    pub fn fails(&self, args: &[&str], code: i32) -> (String, String) {
        self.fails_with(&[], args, code)
    }

    /// [`Project::fails`] with more environment (a storage server's endpoint and keys).
    pub fn fails_with(&self, env: &[(&str, String)], args: &[&str], code: i32) -> (String, String) {
        let out = self.output_with(env, args);
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout).to_string(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        );
        assert_eq!(
            out.status.code(),
            Some(code),
            "smelt {args:?}\nstdout:\n{stdout}\nstderr:\n{stderr}"
        );
        assert!(
            !stderr.contains("panicked") && !stderr.contains("RUST_BACKTRACE"),
            "panic: {stderr}"
        );
        (stdout, stderr)
    }

    /// `smelt run` with the failpoint `point` set (a crash drill).
    pub fn run_with_failpoint(&self, point: &str) -> std::process::Output {
        self.smelt()
            .args(["run"])
            .env("SMELT_FAILPOINT", point)
            .output()
            .unwrap()
    }

    /// `smelt` in the project folder as a plain [`std::process::Command`] (which can be
    /// spawned and killed, unlike [`Project::smelt`]'s), with no failpoint set.
    pub fn smelt_process(&self) -> std::process::Command {
        let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_smelt"));
        self.clean_env(&mut c);
        c
    }

    /// The project folder as working directory, and no smelt setting from the test's
    /// environment.
    fn clean_env(&self, c: &mut std::process::Command) {
        clean_env(c, self.path());
    }

    /// `smelt <args>` with `SMELT_FAILPOINT=<point>:abort` ([`abort_at_in`]).
    pub fn abort_at(&self, point: &str, args: &[&str]) -> std::process::Output {
        abort_at_in(self.path(), point, args)
    }

    /// `smelt run` aborting at the failpoint `point` (a crash drill that kills the process).
    pub fn run_with_abort(&self, point: &str) -> std::process::Output {
        self.abort_at(point, &["run"])
    }

    /// `smelt run` started and left running, its output piped (read it with
    /// `wait_with_output`), to be killed.
    pub fn spawn_run(&self) -> std::process::Child {
        self.piped(&["run"]).spawn().unwrap()
    }

    /// `smelt <args>` with its output piped, ready to spawn (runs started at once).
    /// `smelt <args>` started and held at failpoint `point` (`point:wait=<gate>`): returns
    /// once the process is there, holding it until [`Held::release`].
    pub fn held_at(&self, point: &str, args: &[&str]) -> Held {
        self.held_at_with(&[], point, args)
    }

    /// [`Project::held_at`] with more environment (a storage server's endpoint and keys).
    pub fn held_at_with(&self, env: &[(&str, String)], point: &str, args: &[&str]) -> Held {
        let gate = self.dir.path().join(format!("gate-{}", uuid_like()));
        let child = self
            .piped(args)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .env(
                "SMELT_FAILPOINT",
                format!("{point}:wait={}", gate.display()),
            )
            .spawn()
            .unwrap();
        let mut held = Held { child, gate };
        let reached = held.gate.with_extension("reached");
        let started = std::time::Instant::now();
        while !reached.exists() {
            if let Ok(Some(_)) = held.child.try_wait() {
                let out = held.release();
                panic!(
                    "smelt {args:?} ended before reaching `{point}`:\n{}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            assert!(
                started.elapsed() < std::time::Duration::from_secs(120),
                "smelt {args:?} never reached `{point}`"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        held
    }

    pub fn piped(&self, args: &[&str]) -> std::process::Command {
        let mut c = self.smelt_process();
        c.args(args)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        c
    }

    /// Rows of `smelt --json sql <sql>`, without their NULL columns (`smelt sql --json`
    /// writes them as `null`; the tests' expected rows leave them out, and `row["c"]` is
    /// `Null` either way).
    pub fn query(&self, sql: &str) -> Vec<Value> {
        let out = self.ok(&["--json", "sql", sql]);
        let v: Value = serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"));
        v.as_array().unwrap().iter().map(without_nulls).collect()
    }

    /// `smelt status --json` of the first flow.
    pub fn status(&self) -> Value {
        let out = self.ok(&["--json", "status"]);
        status_rows(&out).swap_remove(0)
    }

    /// The silver table ordered by Id, as text of every column.
    pub fn silver(&self) -> Vec<Value> {
        self.query("SELECT * FROM medallion_demo.product2__silver ORDER BY Id")
    }

    /// Step 1 of the seed: bronze DDL and the first three rows.
    pub fn bronze_step1(&self) {
        self.ok(&["sql", "-f", "bronze.sql"]);
        self.ok(&["sql", "-f", "insert_1.sql"]);
    }
}

/// Whether a run of two started at once lost the commit race: it then failed with exit 1
/// and the message naming the other writer; any other failure fails the test.
pub fn refused_by_a_race(out: &std::process::Output) -> bool {
    if out.status.success() {
        return false;
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("another writer committed first") && stderr.contains("hint: run again"),
        "{stderr}"
    );
    true
}

/// Drops the audit columns (run time, bronze commit time) from rows, for comparing runs
/// over different lakes.
/// Their NULL columns are left out too, as [`Project::query`] leaves them out.
pub fn without_audit(rows: &[Value]) -> Vec<Value> {
    rows.iter()
        .map(|r| {
            let mut r = without_nulls(r);
            r.as_object_mut().unwrap().remove("_update_timestamp");
            r.as_object_mut().unwrap().remove("_ingest_timestamp");
            r
        })
        .collect()
}

/// A JSON row without its NULL columns.
pub fn without_nulls(row: &Value) -> Value {
    match row {
        Value::Object(o) => Value::Object(
            o.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// The number of rows of `table`.
pub fn count(p: &Project, table: &str) -> i64 {
    p.query(&format!("SELECT count(*) AS n FROM {table}"))[0]["n"]
        .as_i64()
        .unwrap()
}

/// A value of a JSON query row as text (`NULL` for null).
pub fn text(v: &Value) -> String {
    match v {
        Value::Null => "NULL".into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Rows of `sql` as text, columns in `columns` order.
pub fn rows(p: &Project, sql: &str, columns: &[&str]) -> Vec<Vec<String>> {
    p.query(sql)
        .iter()
        .map(|r| columns.iter().map(|c| text(&r[*c])).collect())
        .collect()
}

/// The signal that ended a process, if one did.
#[cfg(unix)]
pub fn signal_of(status: &std::process::ExitStatus) -> Option<i32> {
    use std::os::unix::process::ExitStatusExt;
    status.signal()
}

/// The signal that ended a process: none off Unix.
#[cfg(not(unix))]
pub fn signal_of(_status: &std::process::ExitStatus) -> Option<i32> {
    None
}

/// Runs `steps` (JSON lines, see `testenv/iceberg_tables.py`) through pyiceberg on the
/// project's SQL catalog (`catalog.db`) with warehouse `warehouse` and the extra catalog
/// properties `props` (`s3.endpoint`, …); returns what the steps printed.
pub fn pyiceberg(
    p: &Project,
    warehouse: &str,
    props: &[(&str, String)],
    steps: &[Value],
) -> Vec<Value> {
    let uri = format!("sqlite:///{}", p.file("catalog.db").display());
    pyiceberg_at(&uri, warehouse, props, steps)
}

/// [`pyiceberg`] on the catalog at `uri`: `sqlite:///…` (SQL) or `http://…` (REST).
pub fn pyiceberg_at(
    uri: &str,
    warehouse: &str,
    props: &[(&str, String)],
    steps: &[Value],
) -> Vec<Value> {
    use std::io::Write;
    let testenv = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testenv");
    let python = testenv.join(".venv/bin/python");
    assert!(
        python.exists(),
        "pyiceberg is not installed: run `testenv/setup.sh` (the README's test command does)"
    );
    let mut command = std::process::Command::new(python);
    command
        .arg(testenv.join("iceberg_tables.py"))
        .arg("--uri")
        .arg(uri)
        .arg("--warehouse")
        .arg(warehouse);
    for (k, v) in props {
        command.arg("--prop").arg(format!("{k}={v}"));
    }
    let mut child = command
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    {
        let mut stdin = child.stdin.take().unwrap();
        for step in steps {
            writeln!(stdin, "{step}").unwrap();
        }
    }
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "pyiceberg failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The rows of `smelt --json status`'s output `out` (its `flows`).
pub fn status_rows(out: &str) -> Vec<Value> {
    let v: Value = serde_json::from_str(out).unwrap();
    serde_json::from_value(v["flows"].clone()).expect("`flows` is an array")
}

/// `text` (a command's stderr) with `p`'s temporary folder written `[project]`, for a
/// snapshot.
pub fn pinned(p: &Project, text: &str) -> String {
    redact_uuids(&text.replace(&p.path().display().to_string(), "[project]"))
}

/// `text` with every UUID (a data file's name, a metadata file's) as `[uuid]`.
fn redact_uuids(text: &str) -> String {
    let groups = [8, 4, 4, 4, 12];
    let is_uuid = |s: &str| {
        s.len() == 36
            && s.split('-').map(str::len).eq(groups)
            && s.bytes().all(|b| b == b'-' || b.is_ascii_hexdigit())
    };
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while !rest.is_empty() {
        if rest.len() >= 36 && rest.is_char_boundary(36) && is_uuid(&rest[..36]) {
            out.push_str("[uuid]");
            rest = &rest[36..];
        } else {
            let c = rest.chars().next().expect("not empty");
            out.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    out
}

/// A `smelt` process held at a failpoint ([`Project::held_at`]).
pub struct Held {
    child: std::process::Child,
    gate: PathBuf,
}

impl Held {
    /// Lets the process go on; waits for it to end.
    pub fn release(self) -> std::process::Output {
        std::fs::write(&self.gate, b"").unwrap();
        self.child.wait_with_output().unwrap()
    }
}

/// A name no other test's gate has.
fn uuid_like() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!(
        "{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::SeqCst)
    )
}

/// `dir` as working directory, and no smelt setting from the test's environment.
pub fn clean_env(c: &mut std::process::Command, dir: &Path) {
    c.current_dir(dir)
        .env_remove("SMELT_FAILPOINT")
        .env_remove("SMELT_LAKE")
        .env_remove("SMELT_PIPELINE")
        .env_remove("SMELT_SPARK_REMOTE");
}

/// `smelt <args>` in `dir` with `SMELT_FAILPOINT=<point>:abort`: the process aborts at
/// `point` (SIGABRT on Unix), nothing cleaned up. On Unix it runs through `sh` with core
/// dumps off, so that the drills leave no core files behind.
pub fn abort_at_in(dir: &Path, point: &str, args: &[&str]) -> std::process::Output {
    #[cfg(unix)]
    let mut c = {
        let mut c = std::process::Command::new("sh");
        c.arg("-c")
            .arg("ulimit -c 0 2>/dev/null; exec \"$0\" \"$@\"")
            .arg(env!("CARGO_BIN_EXE_smelt"));
        c
    };
    #[cfg(not(unix))]
    let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_smelt"));
    clean_env(&mut c, dir);
    c.args(args)
        .env("SMELT_FAILPOINT", format!("{point}:abort"))
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap()
}

/// Every file under `dir` whose name ends with `suffix`, sorted by name.
pub fn files_under(dir: &std::path::Path, suffix: &str) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(files_under(&path, suffix));
        } else if path.to_string_lossy().ends_with(suffix) {
            out.push(path);
        }
    }
    out.sort();
    out
}
