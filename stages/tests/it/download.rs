//! `data/download@1` against a real HTTP server on 127.0.0.1.

use std::time::{Duration, Instant};

use crate::download_support::{payload, run_stage, sha256_hex};
use pipe_test_support::http::{unreachable_url, Reply, Server};
use serde_json::json;

const SIZE: usize = 600_000;

fn serving(body: Vec<u8>) -> Server {
    Server::start(move |request, _| {
        if request.path == "/data.bin" {
            Reply::ranged(request, &body)
        } else {
            Reply::status(404)
        }
    })
}

#[test]
fn downloads_and_verifies_sha256() {
    let body = payload(SIZE);
    let server = serving(body.clone());
    let run = run_stage(
        "data/download",
        json!({ "url": server.url("/data.bin"), "sha256": sha256_hex(&body) }),
        &[],
    );
    run.assert_done();
    assert_eq!(std::fs::read(run.output_dir.join("file")).unwrap(), body);
    let metrics = run.metrics();
    assert_eq!(metrics["bytes"], SIZE);
    assert!(metrics["seconds"].as_f64().unwrap() > 0.0);
    assert!(metrics["bytes_per_second"].as_f64().unwrap() > 0.0);
    let last_progress = run
        .events
        .iter()
        .rev()
        .find(|e| e["event"] == "progress")
        .expect("a progress event");
    assert_eq!(last_progress["unit"], "bytes");
    assert_eq!(last_progress["done"], SIZE);
    assert_eq!(last_progress["total"], SIZE);
    let request = &server.requests()[0];
    assert_eq!(request.header("accept-encoding"), Some("identity"));
    assert_eq!(request.header("range"), None);
}

#[test]
fn verifies_md5_and_sha1() {
    use md5::Digest as _;
    let body = payload(10_000);
    let server = serving(body.clone());
    let md5 = hex::encode(md5::Md5::digest(&body));
    let sha1 = hex::encode(sha1::Sha1::digest(&body));
    for (name, value) in [("md5", md5), ("sha1", sha1.to_uppercase())] {
        let run = run_stage(
            "data/download",
            json!({ "url": server.url("/data.bin"), name: value }),
            &[],
        );
        run.assert_done();
        assert_eq!(
            std::fs::read(run.output_dir.join("file")).unwrap(),
            body,
            "with {name}"
        );
    }
}

#[test]
fn resumes_with_range_after_a_dropped_connection() {
    let body = payload(SIZE);
    let served = body.clone();
    let server = Server::start(move |request, earlier| match earlier {
        0 => Reply::ranged(request, &served).cut_after(SIZE / 2),
        _ => Reply::ranged(request, &served),
    });
    let run = run_stage(
        "data/download",
        json!({ "url": server.url("/data.bin"), "sha256": sha256_hex(&body), "retries": 2 }),
        &[],
    );
    run.assert_done();
    assert_eq!(std::fs::read(run.output_dir.join("file")).unwrap(), body);
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[0].header("range"), None);
    assert_eq!(
        requests[1].header("range"),
        Some(format!("bytes={}-", SIZE / 2).as_str())
    );
    assert!(
        run.messages()
            .iter()
            .any(|m| m.contains(&format!("resuming at byte {}", SIZE / 2))),
        "{:?}",
        run.messages()
    );
}

#[test]
fn a_stalled_transfer_times_out_and_resumes() {
    let body = payload(SIZE);
    let served = body.clone();
    let server = Server::start(move |request, earlier| match earlier {
        0 => Reply::ranged(request, &served)
            .cut_after(SIZE / 4)
            .stall(Duration::from_secs(20)),
        _ => Reply::ranged(request, &served),
    });
    let started = Instant::now();
    let run = run_stage(
        "data/download",
        json!({ "url": server.url("/data.bin"), "sha256": sha256_hex(&body), "timeout_secs": 1 }),
        &[],
    );
    run.assert_done();
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "took {:?}",
        started.elapsed()
    );
    assert_eq!(std::fs::read(run.output_dir.join("file")).unwrap(), body);
    let requests = server.requests();
    assert_eq!(
        requests[1].header("range"),
        Some(format!("bytes={}-", SIZE / 4).as_str())
    );
}

#[test]
fn starts_over_when_the_server_ignores_range() {
    let body = payload(SIZE);
    let served = body.clone();
    let server = Server::start(move |_, earlier| match earlier {
        0 => Reply::whole(&served).cut_after(SIZE / 3),
        _ => Reply::whole(&served),
    });
    let run = run_stage(
        "data/download",
        json!({ "url": server.url("/data.bin"), "sha256": sha256_hex(&body), "retries": 2 }),
        &[],
    );
    run.assert_done();
    assert_eq!(std::fs::read(run.output_dir.join("file")).unwrap(), body);
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    assert!(requests[1].header("range").is_some());
    assert!(
        run.messages().iter().any(|m| m.contains("starting over")),
        "{:?}",
        run.messages()
    );
}

#[test]
fn retries_after_a_server_error() {
    let body = payload(1000);
    let served = body.clone();
    let server = Server::start(move |request, earlier| match earlier {
        0 => Reply::status(503),
        _ => Reply::ranged(request, &served),
    });
    let run = run_stage(
        "data/download",
        json!({ "url": server.url("/data.bin"), "sha256": sha256_hex(&body) }),
        &[],
    );
    run.assert_done();
    assert_eq!(server.requests().len(), 2);
    assert!(
        run.messages().iter().any(|m| m.contains("HTTP 503")),
        "{:?}",
        run.messages()
    );
}

#[test]
fn wrong_checksum_fails_and_writes_no_output() {
    let body = payload(SIZE);
    let server = serving(body.clone());
    let wrong = sha256_hex(b"something else");
    let run = run_stage(
        "data/download",
        json!({ "url": server.url("/data.bin"), "sha256": wrong }),
        &[],
    );
    assert_eq!(run.code, 1);
    let (message, hint) = run.error();
    assert!(message.contains("checksum"), "{message}");
    assert!(
        message.contains(&wrong) && message.contains(&sha256_hex(&body)),
        "{message}"
    );
    assert!(hint.contains("changed or is corrupt"), "{hint}");
    assert!(!run.output_dir.join("file").exists());
    let scratch = run.dir.path().join("scratch");
    let leftovers: Vec<_> = std::fs::read_dir(&scratch).unwrap().collect();
    assert!(
        leftovers.is_empty(),
        "partial file left in scratch: {leftovers:?}"
    );
}

#[test]
fn falls_back_to_a_mirror_after_a_404() {
    let body = payload(5000);
    let server = serving(body.clone());
    let run = run_stage(
        "data/download",
        json!({
            "url": server.url("/gone.bin"),
            "mirrors": [server.url("/data.bin")],
            "sha256": sha256_hex(&body),
        }),
        &[],
    );
    run.assert_done();
    assert_eq!(std::fs::read(run.output_dir.join("file")).unwrap(), body);
    let paths: Vec<String> = server.requests().into_iter().map(|r| r.path).collect();
    assert_eq!(paths, ["/gone.bin", "/data.bin"], "a 404 is not retried");
}

#[test]
fn unreachable_url_names_the_url_and_the_fixes() {
    let url = unreachable_url("/aclImdb_v1.tar.gz");
    let mirror = unreachable_url("/mirror/aclImdb_v1.tar.gz");
    let started = Instant::now();
    let run = run_stage(
        "data/download",
        json!({ "url": url, "mirrors": [mirror], "md5": "7c2ac02c03563afcf9b574c7e56c153a", "retries": 1 }),
        &[],
    );
    assert!(
        started.elapsed().as_secs() < 10,
        "backoff too long: {:?}",
        started.elapsed()
    );
    assert_eq!(run.code, 1);
    let (message, hint) = run.error();
    assert!(message.contains("aclImdb_v1.tar.gz"), "{message}");
    assert!(
        message.contains(&url) && message.contains(&mirror),
        "{message}"
    );
    assert!(message.contains("2 tries"), "{message}");
    assert!(hint.contains("file:///path/to/local/copy"), "{hint}");
    assert!(hint.contains("mirrors:") && hint.contains("run:"), "{hint}");
    assert!(!run.output_dir.join("file").exists());
}

#[test]
fn copies_and_verifies_a_file_url() {
    let body = payload(70_000);
    let local = tempfile::tempdir().unwrap();
    let path = local.path().join("copy of data.bin");
    std::fs::write(&path, &body).unwrap();
    let url = format!("file://{}", path.display()).replace(' ', "%20");
    let run = run_stage(
        "data/download",
        json!({ "url": url, "sha256": sha256_hex(&body) }),
        &[],
    );
    run.assert_done();
    assert_eq!(std::fs::read(run.output_dir.join("file")).unwrap(), body);

    let unverified = run_stage("data/download", json!({ "url": url }), &[]);
    unverified.assert_done();
    let wanted = format!("sha256: {}", sha256_hex(&body));
    assert!(
        unverified.messages().iter().any(|m| m.contains(&wanted)),
        "{:?}",
        unverified.messages()
    );

    let corrupt = run_stage(
        "data/download",
        json!({ "url": url, "sha256": sha256_hex(b"x") }),
        &[],
    );
    assert_eq!(corrupt.code, 1);
    assert!(corrupt.error().0.contains("checksum"));
}

#[test]
fn http_needs_exactly_one_checksum() {
    let run = run_stage(
        "data/download",
        json!({ "url": "http://127.0.0.1:9/x.bin" }),
        &[],
    );
    assert_eq!(run.code, 1);
    let (message, hint) = run.error();
    assert!(message.contains("checksum"), "{message}");
    assert!(hint.contains("sha256"), "{hint}");

    let both = run_stage(
        "data/download",
        json!({ "url": "http://127.0.0.1:9/x.bin", "md5": "0".repeat(32), "sha256": "0".repeat(64) }),
        &[],
    );
    assert!(both.error().0.contains("exactly one"));

    let short = run_stage(
        "data/download",
        json!({ "url": "http://127.0.0.1:9/x.bin", "sha256": "abc" }),
        &[],
    );
    assert!(short.error().0.contains("64 hex digits"));

    let ftp = run_stage(
        "data/download",
        json!({ "url": "ftp://example.org/x", "sha256": "0".repeat(64) }),
        &[],
    );
    assert!(ftp
        .error()
        .0
        .contains("not an http://, https:// or file:// URL"));
}
