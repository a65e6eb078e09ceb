//! What a hostile S3 server (or whoever answers at a remote's endpoint)
//! can do to pipe by how it answers: at worst the remote is given up on,
//! with one line saying why. A listing without end stops at its limit; a
//! body without end at the limit of one answer; a key the listing makes
//! up is dropped, never a panic; a server dripping a byte at a time is
//! cut off at its deadline and `pipe run` runs the stage itself; a
//! redirect is refused, so the request's credentials reach no other host.
//! Each server is the tests' scripted one on 127.0.0.1, and each `pipe`
//! runs under the memory limit and the watchdog of `untrusted_files`, so a
//! regression fails the test instead of hanging it.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use pipe_test_support::http::{Reply, Request, Server};
use pipe_test_support::TestProject;

use crate::untrusted_files::{pipe, Finished};

const PIPELINE: &str = r#"stages:
  make:
    run: echo made > made.txt
    outs: [made.txt]
"#;

/// The remote's prefix: every key pipe asks for starts with it.
const PREFIX: &str = "team/project";

fn project() -> TestProject {
    let project = TestProject::new();
    project.write("pipe.yaml", PIPELINE);
    project
}

/// The environment that points `pipe` at `server` as an S3 remote, with a
/// deadline floor of 2 s.
fn remote_env(server: &Server) -> Vec<(&'static str, String)> {
    vec![
        ("PIPE_REMOTE", format!("s3://pipe-cache/{PREFIX}")),
        ("PIPE_REMOTE_ENDPOINT", server.base.clone()),
        ("AWS_ACCESS_KEY_ID", "pipe-test-access".to_string()),
        (
            "AWS_SECRET_ACCESS_KEY",
            "pipe-test-secret-0123456789".to_string(),
        ),
        ("AWS_REGION", "us-east-1".to_string()),
        ("PIPE_REMOTE_DEADLINE_S", "2".to_string()),
    ]
}

fn is_listing(request: &Request) -> bool {
    request.method == "GET" && request.path.contains("list-type=2")
}

/// A ListObjectsV2 page holding `keys`, announcing a next page if `next`.
fn listing_page(keys: &[String], next: Option<usize>) -> Vec<u8> {
    let mut xml = String::from(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\
         <ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">\
         <Name>pipe-cache</Name>",
    );
    match next {
        Some(token) => xml.push_str(&format!(
            "<IsTruncated>true</IsTruncated><NextContinuationToken>t{token}</NextContinuationToken>"
        )),
        None => xml.push_str("<IsTruncated>false</IsTruncated>"),
    }
    for key in keys {
        xml.push_str(&format!(
            "<Contents><Key>{key}</Key><LastModified>2024-01-01T00:00:00.000Z</LastModified>\
             <ETag>\"0\"</ETag><Size>10</Size><StorageClass>STANDARD</StorageClass></Contents>"
        ));
    }
    xml.push_str("</ListBucketResult>");
    xml.into_bytes()
}

fn assert_no_panic(finished: &Finished) {
    let stderr = finished.stderr();
    assert_ne!(finished.code(), Some(101), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

fn assert_given_up_once(stderr: &str, why: &str) {
    let given_up: Vec<&str> = stderr
        .lines()
        .filter(|line| line.contains("going on with the local cache only"))
        .collect();
    assert_eq!(given_up.len(), 1, "{stderr}");
    assert!(given_up[0].contains(why), "{stderr}");
}

#[test]
fn a_listing_that_never_ends_stops_at_its_limit_with_an_error_naming_it() {
    // Every page holds 1,000 new keys and announces another.
    let pages = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&pages);
    let server = Server::start(move |request, _| {
        if !is_listing(request) {
            return Reply::status(404);
        }
        let page = counter.fetch_add(1, Ordering::SeqCst);
        let keys: Vec<String> = (0..1000)
            .map(|i| format!("{PREFIX}/runs/c{page}/u{page}-{i}.json"))
            .collect();
        Reply::whole(&listing_page(&keys, Some(page + 1)))
    });
    let project = project();
    let pulled = pipe(&project, &remote_env(&server), &["cache", "pull"]);
    assert_no_panic(&pulled);
    let stderr = pulled.stderr();
    assert_eq!(pulled.code(), Some(6), "{stderr}");
    assert!(stderr.contains("100000 entries"), "{stderr}");
    assert!(stderr.contains("Limits"), "{stderr}");
    // Stopped at the limit: about 100 pages, not one more than needed.
    assert!(pages.load(Ordering::SeqCst) <= 101);
}

#[test]
fn a_listing_page_without_end_is_cut_off_at_the_limit_of_one_answer() {
    let chunk = vec![b' '; 64 * 1024];
    let server = Server::start(move |request, _| {
        if is_listing(request) {
            Reply::endless(&chunk)
        } else {
            Reply::status(404)
        }
    });
    let project = project();
    let pulled = pipe(&project, &remote_env(&server), &["cache", "pull"]);
    assert_no_panic(&pulled);
    let stderr = pulled.stderr();
    assert_eq!(pulled.code(), Some(6), "{stderr}");
    assert!(stderr.contains("longer than 64 MiB"), "{stderr}");
    assert!(pulled.peak_rss < 1 << 30, "{} bytes", pulled.peak_rss);
}

#[test]
fn keys_outside_the_listed_prefix_are_dropped_never_a_panic() {
    // Shorter than the prefix, a prefix of it, outside it, a multibyte
    // character where the prefix ends, `..`: none is a path pipe reads.
    let keys: Vec<String> = [
        "t",
        "team",
        "team/projec",
        "éééééééééééééééééééé",
        "other/project/runs/c/u1.json",
        "team/project/runs/../../../x.json",
    ]
    .map(str::to_string)
    .to_vec();
    let server = Server::start(move |request, _| {
        if is_listing(request) {
            Reply::whole(&listing_page(&keys, None))
        } else {
            Reply::status(404)
        }
    });
    let project = project();
    let pulled = pipe(&project, &remote_env(&server), &["cache", "pull"]);
    assert_no_panic(&pulled);
    let stderr = pulled.stderr();
    assert_eq!(pulled.code(), Some(0), "{stderr}");
    assert!(stderr.contains("0 run records, 0 new here"), "{stderr}");
    // Nothing outside the prefix was read.
    let reads: Vec<String> = server
        .requests()
        .into_iter()
        .filter(|request| !is_listing(request))
        .map(|request| request.path)
        .collect();
    assert!(reads.is_empty(), "{reads:?}");
}

/// A server whose every GET of a file answers 200 and then drips its
/// 1,000 bytes a byte every half second (500 s in all).
fn dripping_server(listing: Vec<String>) -> Server {
    Server::start(move |request, _| {
        if is_listing(request) {
            return Reply::whole(&listing_page(&listing, None));
        }
        match request.method.as_str() {
            "GET" => Reply::whole(&[b'{'; 1000]).drip(Duration::from_millis(500)),
            _ => Reply::status(404),
        }
    })
}

#[test]
fn a_server_dripping_an_answer_is_cut_off_and_the_run_runs_the_stage_itself() {
    let server = dripping_server(Vec::new());
    let project = project();
    let finished = pipe(&project, &remote_env(&server), &["run", "--json"]);
    assert_no_panic(&finished);
    let run = finished.run();
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.status("make"), "ran", "{}", run.stderr);
    assert_eq!(project.read("made.txt"), "made\n");
    // One line says why the remote was given up on (and the end of the
    // run, as for any remote given up on, what was not pushed).
    assert_given_up_once(&run.stderr, "slower than pipe waits for");
}

#[test]
fn a_server_dripping_a_run_record_ends_a_pull_with_an_error() {
    let server = dripping_server(vec![format!("{PREFIX}/runs/c/u1.json")]);
    let project = project();
    let pulled = pipe(&project, &remote_env(&server), &["cache", "pull"]);
    assert_no_panic(&pulled);
    let stderr = pulled.stderr();
    assert_eq!(pulled.code(), Some(6), "{stderr}");
    assert!(stderr.contains("slower than pipe waits for"), "{stderr}");
}

#[test]
fn a_redirect_to_another_host_is_refused_and_no_credential_reaches_it() {
    // The other host answers everything as a remote that has nothing.
    let elsewhere = Server::start(|_, _| Reply::status(404));
    let target = elsewhere.base.clone();
    let server = Server::start(move |request, _| {
        Reply::status(307).header("Location", &format!("{target}{}", request.path))
    });
    let project = project();
    let mut env = remote_env(&server);
    env.push((
        "AWS_SESSION_TOKEN",
        "pipe-test-session-token-0123".to_string(),
    ));
    let finished = pipe(&project, &env, &["run", "--json"]);
    assert_no_panic(&finished);
    let run = finished.run();
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.status("make"), "ran", "{}", run.stderr);
    assert_given_up_once(&run.stderr, "follows no redirect");
    // The token went to the configured endpoint, and nowhere else.
    assert!(server
        .requests()
        .iter()
        .any(|request| request.header("x-amz-security-token").is_some()));
    assert!(
        elsewhere.requests().is_empty(),
        "{:?}",
        elsewhere.requests()
    );
}
