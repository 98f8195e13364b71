//! Object stores that refuse or do not answer, through the real binary: wrong credentials
//! (moto checking keys as AWS does), an endpoint that accepts connections and never answers,
//! and one that refuses them. Each run ends in bounded time (the pipeline's `storage:`
//! timeouts and retries) with one error naming the URL and the fix, exit code 1, and
//! nothing written: bronze stays on local disk, silver was to go to the unanswering lake.

use std::net::TcpListener;
use std::time::{Duration, Instant};

use crate::common::{Project, pinned};
use smelt_test::services::{S3Server, s3_env};

/// Tight limits, so a store that does not answer fails fast: 1 s a request, two retries
/// within 3 s.
const STORAGE: &str =
    "storage:\n  timeout: 1s\n  connect_timeout: 1s\n  retries: 2\n  retry_timeout: 3s\n";

/// product2 with bronze written locally, and the lake (silver, the event log) at
/// `s3://lake/warehouse` on the endpoint the test gives.
fn silver_on_s3(storage: &str) -> Project {
    let p = Project::product2();
    p.ok(&["sql", "-f", "bronze.sql"]);
    p.ok(&["sql", "-f", "insert_1.sql"]);
    let yaml = std::fs::read_to_string(p.file("smelt.yaml")).unwrap();
    let bronze = p.file("lake/medallion_demo/product2__bronze");
    p.write(
        "smelt.yaml",
        &format!(
            "{}\ntables:\n  medallion_demo.product2__bronze: {}\n{storage}",
            yaml.replace("lake: ./lake", "lake: s3://lake/warehouse"),
            bronze.display()
        ),
    );
    p
}

/// `smelt run` against `env`: requires exit code 1 within `limit`; returns stderr with the
/// project and the endpoint's port redacted.
fn run_fails(p: &Project, env: &[(&str, String)], port: u16, limit: Duration) -> String {
    let started = Instant::now();
    let out = p
        .smelt()
        .arg("run")
        .envs(env.iter().map(|(k, v)| (k, v)))
        .timeout(limit + Duration::from_secs(60))
        .output()
        .unwrap();
    let took = started.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        took < limit,
        "the run took {took:?} (limit {limit:?}):\n{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    pinned(p, &stderr).replace(&port.to_string(), "[port]")
}

/// Pins `err` with the times a request took as `[time]`.
fn pin(name: &str, err: &str) {
    insta::with_settings!({filters => vec![(r" in [0-9.]+(ns|µs|ms|s)", " in [time]")]}, {
        insta::assert_snapshot!(name, err);
    });
}

/// Nothing of the run is on local disk beyond bronze: no local lake folder was made.
fn nothing_written_locally(p: &Project) {
    let lake = p.file("lake/medallion_demo");
    let names: Vec<String> = std::fs::read_dir(&lake)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["product2__bronze"], "{names:?}");
}

#[test]
fn wrong_credentials_are_refused_at_once_naming_the_store() {
    let s3 = S3Server::start_with("lake", &["--check-keys"]);
    let p = silver_on_s3("");
    // A refused credential is not retried: the defaults' minutes of retries never start.
    let err = run_fails(&p, &s3.env(), s3.port, Duration::from_secs(30));
    pin("wrong_credentials", &err);
    nothing_written_locally(&p);
}

#[test]
fn an_endpoint_that_never_answers_ends_in_the_configured_time() {
    // Accepts every connection and never answers.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for conn in listener.incoming() {
            held.push(conn);
        }
    });
    let p = silver_on_s3(STORAGE);
    let env = s3_env(addr.port());
    let err = run_fails(&p, &env, addr.port(), Duration::from_secs(30));
    pin("endpoint_never_answers", &err);
    nothing_written_locally(&p);
    // A read is retried (a write that may have landed is not): two retries within 3 s,
    // a second each.
    let started = Instant::now();
    let out = p
        .smelt()
        .args(["sql", "SELECT * FROM medallion_demo.product2__silver"])
        .envs(env.iter().map(|(k, v)| (k, v)))
        .timeout(Duration::from_secs(90))
        .output()
        .unwrap();
    let took = started.elapsed();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(took < Duration::from_secs(30), "{took:?}: {err}");
    let err = pinned(&p, &err).replace(&addr.port().to_string(), "[port]");
    pin("read_of_a_store_that_never_answers", &err);
}

#[test]
fn an_endpoint_that_refuses_connections_ends_in_the_configured_time() {
    // A port nothing listens on: bound, then closed.
    let addr = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let p = silver_on_s3(STORAGE);
    let err = run_fails(
        &p,
        &s3_env(addr.port()),
        addr.port(),
        Duration::from_secs(30),
    );
    pin("endpoint_refuses_connections", &err);
    nothing_written_locally(&p);
}

#[test]
fn storage_settings_that_are_no_durations_are_refused_by_name() {
    let p = silver_on_s3("storage:\n  timeout: soon\n  connect_timeout: 0s\n");
    let (_, err) = p.fails(&["validate"], 2);
    insta::assert_snapshot!("storage_settings_invalid", pinned(&p, &err));
    let p = silver_on_s3("storage:\n  retries: many\n");
    let (_, err) = p.fails(&["validate"], 2);
    insta::assert_snapshot!("storage_retries_not_a_number", pinned(&p, &err));
}
