//! Credentials never leave the stage that needs them: a password or token in
//! a download URL, and an `env:` value marked secret, reach the stage but
//! appear nowhere pipe prints or stores (run history, logs, cache, catalog).

use std::collections::HashMap;
use std::path::Path;
use std::process::Output;

use pipe_test_support::http::Server;
use pipe_test_support::{RunResult, TestProject};

const URL_PASSWORD: &str = "pa55w0rd-xyzzy";
const URL_TOKEN: &str = "SECRET123-url-token";
const ENV_TOKEN: &str = "SECRET789-env-token";
const FRAGMENT_TOKEN: &str = "SECRET456-fragment-token";
const DATA: &[u8] = b"id,text\n1,hello\n";
const DATA_SHA256: &str = "b4fd5c2b999894bb6a3a78e61a5f5c5343d8cba7ab3f7e0b63287acc2f370362";

/// A download whose URL carries a password and an access token (through a
/// param, so it also sits in the run's params), and a command that receives
/// a secret env value and writes its hex form, so the test can tell that
/// the real value arrived without the value itself ending up in an output.
fn pipeline(server: &Server) -> String {
    format!(
        r#"
params:
  source: "http://reader:{URL_PASSWORD}@127.0.0.1:{port}/data.csv?access_token={URL_TOKEN}&v=1"
stages:
  fetch:
    uses: data/download@1
    with:
      url: "${{params.source}}"
      sha256: {DATA_SHA256}
  use_token:
    run: printf %s "$TOKEN" | od -An -tx1 | tr -d ' \n' > token.hex
    env:
      TOKEN: {{ from_env: PIPE_TEST_TOKEN, secret: true }}
      MODE: fast
    outs: [token.hex]
"#,
        port = server.port()
    )
}

fn serve() -> Server {
    let mut files = HashMap::new();
    // The server answers only the exact path and query: a masked token 404s.
    files.insert(
        format!("/data.csv?access_token={URL_TOKEN}&v=1"),
        DATA.to_vec(),
    );
    Server::serving(files)
}

fn hex(text: &str) -> String {
    text.bytes().map(|byte| format!("{byte:02x}")).collect()
}

/// Every secret these tests hand to pipe.
fn secrets() -> [&'static str; 4] {
    [URL_PASSWORD, URL_TOKEN, ENV_TOKEN, FRAGMENT_TOKEN]
}

fn assert_no_secret(what: &str, bytes: &[u8]) {
    let text = String::from_utf8_lossy(bytes);
    for secret in secrets() {
        assert!(
            !text.contains(secret),
            "{what} contains `{secret}`:\n{text}"
        );
    }
}

fn assert_output_clean(what: &str, output: &Output) {
    assert_no_secret(&format!("stdout of `{what}`"), &output.stdout);
    assert_no_secret(&format!("stderr of `{what}`"), &output.stderr);
}

fn assert_tree_clean(dir: &Path) -> usize {
    let mut checked = 0;
    for entry in std::fs::read_dir(dir).expect("read dir").flatten() {
        let path = entry.path();
        let kind = entry.file_type().expect("file type");
        if kind.is_dir() {
            checked += assert_tree_clean(&path);
        } else if kind.is_file() {
            let bytes = std::fs::read(&path).expect("read file");
            assert_no_secret(&path.display().to_string(), &bytes);
            checked += 1;
        }
    }
    checked
}

/// Every file under `dir`, concatenated.
fn all_text(dir: &Path) -> String {
    let mut text = String::new();
    for entry in std::fs::read_dir(dir).expect("read dir").flatten() {
        let path = entry.path();
        if path.is_dir() {
            text.push_str(&all_text(&path));
        } else {
            text.push_str(&std::fs::read_to_string(&path).unwrap_or_default());
        }
    }
    text
}

fn run_with(project: &TestProject, token: &str, args: &[&str]) -> Output {
    project
        .command()
        .args(args)
        .env("PIPE_TEST_TOKEN", token)
        .output()
        .expect("run pipe")
}

#[test]
fn credentials_reach_the_stage_but_nothing_pipe_prints_or_stores() {
    let server = serve();
    let project = TestProject::new();
    project.write("pipe.yaml", &pipeline(&server));
    let source = format!(
        "source=http://reader:{URL_PASSWORD}@127.0.0.1:{}/data.csv?access_token={URL_TOKEN}&v=1",
        server.port()
    );

    let first = run_with(&project, ENV_TOKEN, &["run", "-v", "--set", &source]);
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    assert_output_clean("run", &first);
    assert_eq!(
        std::fs::read(project.path(".pipe/out/pipe/fetch/file")).unwrap(),
        DATA
    );
    assert_eq!(project.read("token.hex"), hex(ENV_TOKEN));

    // A second, forced run so that `diff` has two runs to compare.
    let second = run_with(&project, ENV_TOKEN, &["run", "--json", "--force-all"]);
    assert!(
        second.status.success(),
        "{}",
        String::from_utf8_lossy(&second.stderr)
    );
    assert_output_clean("run --json --force-all", &second);

    assert_every_reader_clean(&project, "use_token");
    // The manifests stored with the results say what was masked.
    let actions = all_text(&project.path(".pipe/cache/actions"));
    // Compared without blanks: a result keeps its manifest as written,
    // compact JSON inside the pretty file.
    let unspaced: String = actions.split_whitespace().collect();
    assert!(unspaced.contains(r#""TOKEN":"***""#), "{actions}");
    assert!(
        actions.contains(&format!(
            "http://***@127.0.0.1:{}/data.csv?access_token=***&v=1",
            server.port()
        )),
        "{actions}"
    );

    let checked = assert_tree_clean(&project.path(".pipe"));
    assert!(checked > 10, "only {checked} files under .pipe");
}

/// A download whose URL carries its token in the fragment, as OAuth's
/// implicit flow hands it over (no client sends a fragment to the server),
/// and a command that writes the hex form of the URL it was given (through
/// `env:`: a URL with `#`, `&` and `=` is no plain value for a command's
/// text).
fn fragment_pipeline(server: &Server, token: &str) -> String {
    format!(
        r#"
params:
  source: "http://127.0.0.1:{port}/data.csv#access_token={token}&token_type=bearer"
stages:
  fetch:
    uses: data/download@1
    with:
      url: "${{params.source}}"
      sha256: {DATA_SHA256}
  echo_url:
    run: printf %s "$SOURCE" | od -An -tx1 | tr -d ' \n' > url.hex
    env: {{ SOURCE: "${{params.source}}" }}
    outs: [url.hex]
"#,
        port = server.port()
    )
}

#[test]
fn a_token_in_a_url_fragment_reaches_the_stage_but_nothing_pipe_prints_or_stores() {
    let mut files = HashMap::new();
    files.insert("/data.csv".to_string(), DATA.to_vec());
    let server = Server::serving(files);
    let project = TestProject::new();
    project.write("pipe.yaml", &fragment_pipeline(&server, FRAGMENT_TOKEN));
    let url = format!(
        "http://127.0.0.1:{}/data.csv#access_token={FRAGMENT_TOKEN}&token_type=bearer",
        server.port()
    );
    let source = format!("source={url}");

    let first = run_with(&project, ENV_TOKEN, &["run", "-v", "--set", &source]);
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    assert_output_clean("run", &first);
    assert_eq!(
        std::fs::read(project.path(".pipe/out/pipe/fetch/file")).unwrap(),
        DATA
    );
    assert_eq!(project.read("url.hex"), hex(&url));
    let second = run_with(&project, ENV_TOKEN, &["run", "--json", "--force-all"]);
    assert!(
        second.status.success(),
        "{}",
        String::from_utf8_lossy(&second.stderr)
    );
    assert_output_clean("run --json --force-all", &second);
    assert_every_reader_clean(&project, "echo_url");
    let actions = all_text(&project.path(".pipe/cache/actions"));
    assert!(
        actions.contains(&format!(
            "http://127.0.0.1:{}/data.csv#access_token=***&token_type=bearer",
            server.port()
        )),
        "{actions}"
    );
    let checked = assert_tree_clean(&project.path(".pipe"));
    assert!(checked > 10, "only {checked} files under .pipe");

    // As for a token in the query: another token is the same file.
    project.write(
        "pipe.yaml",
        &fragment_pipeline(&server, "other-fragment-token"),
    );
    let fetches = server.requests().len();
    let rotated = RunResult::from_output(run_with(&project, ENV_TOKEN, &["run", "--json"]));
    assert_eq!(rotated.code, 0, "{}", rotated.stderr);
    assert_eq!(rotated.status("fetch"), "fresh");
    assert_eq!(server.requests().len(), fetches);
}

#[test]
fn rotating_a_credential_reruns_nothing() {
    let server = serve();
    let project = TestProject::new();
    project.write("pipe.yaml", &pipeline(&server));
    let first = run_with(&project, ENV_TOKEN, &["run", "--json"]);
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );

    // Another password, token and secret env value; the same file.
    let rotated = pipeline(&server)
        .replace(URL_PASSWORD, "other-password")
        .replace(URL_TOKEN, "other-token");
    project.write("pipe.yaml", &rotated);
    let fetches = server.requests().len();
    let second = RunResult::from_output(run_with(&project, "other-env-token", &["run", "--json"]));
    assert_eq!(second.code, 0, "{}", second.stderr);
    assert_eq!(second.status("fetch"), "fresh");
    assert_eq!(second.status("use_token"), "fresh");
    assert_eq!(server.requests().len(), fetches);

    // A plain env value is part of the key as before.
    project.write("pipe.yaml", &rotated.replace("MODE: fast", "MODE: slow"));
    let third = RunResult::from_output(run_with(&project, "other-env-token", &["run", "--json"]));
    assert_eq!(third.code, 0, "{}", third.stderr);
    assert_eq!(third.status("use_token"), "ran");
    assert_eq!(project.read("token.hex"), hex("other-env-token"));
}

#[test]
fn a_failed_download_names_the_url_without_its_credentials() {
    let server = serve();
    let project = TestProject::new();
    let missing = server
        .url(&format!("/missing.csv?access_token={URL_TOKEN}"))
        .replace("http://", &format!("http://reader:{URL_PASSWORD}@"));
    project.write(
        "pipe.yaml",
        &format!("stages:\n  fetch:\n    uses: data/download@1\n    with:\n      url: \"{missing}\"\n      retries: 0\n      sha256: {DATA_SHA256}\n"),
    );
    let output = project.pipe(&["run"]);
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!(
            "http://***@127.0.0.1:{}/missing.csv?access_token=***",
            server.port()
        )),
        "{stderr}"
    );
    assert_output_clean("run", &output);
    assert_tree_clean(&project.path(".pipe"));
}

#[test]
fn a_malformed_secret_env_is_a_located_error() {
    let cases = [
        (
            "TOKEN: { from_env: PIPE_TEST_TOKEN }",
            "pipe.yaml:5:14",
            "must say whether its value is a secret",
        ),
        (
            "TOKEN: { from_env: PIPE_TEST_TOKEN, secret: yes-please }",
            "pipe.yaml:5:51",
            "`secret` of env `TOKEN` (stage `s`) must be `true` or `false`",
        ),
        (
            "TOKEN: { from_env: PIPE_TEST_TOKEN, secret: true, value: x }",
            "pipe.yaml:5:57",
            "has no field `value`",
        ),
        (
            "TOKEN: { from_env: PIPE_NOT_SET_ANYWHERE, secret: true }",
            "pipe.yaml:5:26",
            "`PIPE_NOT_SET_ANYWHERE`, which is not set",
        ),
        (
            "TOKEN: { secret: true }",
            "pipe.yaml:5:14",
            "needs `from_env`",
        ),
    ];
    for (entry, location, message) in cases {
        let project = TestProject::new();
        project.write(
            "pipe.yaml",
            &format!("stages:\n  s:\n    run: echo hi > out.txt\n    env:\n      {entry}\n    outs: [out.txt]\n"),
        );
        let output = project
            .command()
            .arg("validate")
            .env("PIPE_TEST_TOKEN", ENV_TOKEN)
            .env_remove("PIPE_NOT_SET_ANYWHERE")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{entry}: {stderr}");
        assert!(stderr.contains(location), "{entry}: {stderr}");
        assert!(stderr.contains(message), "{entry}: {stderr}");
        assert!(stderr.contains("hint:"), "{entry}: {stderr}");
    }
}

/// `show`, `runs`, `why`, `diff`, `status` and a dry run, each as text and
/// JSON where it has both, succeed and print no credential.
fn assert_every_reader_clean(project: &TestProject, command_stage: &str) {
    for args in [
        vec!["show"],
        vec!["show", "--json"],
        vec!["runs"],
        vec!["runs", "--json"],
        vec!["why", "fetch"],
        vec!["why", command_stage, "--json"],
        vec!["diff"],
        vec!["diff", "--json"],
        vec!["status"],
        vec!["status", "--json"],
        vec!["run", "--dry-run"],
    ] {
        let output = run_with(project, ENV_TOKEN, &args);
        assert!(
            output.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        assert_output_clean(&args.join(" "), &output);
    }
}

/// Token names spelled as writers spell them: escaped (`%5F`), after a
/// `;`, in a query or a fragment, a forge's own name, camelCase, a
/// header's name, a Google API key (`key=AIza...`, where a bare `key` is
/// no secret) and an OAuth callback's code (with its `state`).
const SPELLED: [(&str, &str); 11] = [
    ("a", "https://h.example/cb#access%5Ftoken=SPELLED-A1"),
    ("b", "https://h.example/cb#state=s;access_token=SPELLED-B2"),
    ("c", "https://h.example/f?access%5Ftoken=SPELLED-C3&page=2"),
    (
        "d",
        "https://gitlab.example/api/v4/f?private_token=SPELLED-D4",
    ),
    ("e", "https://h.example/f?x=1;Access-Token=SPELLED-E5"),
    ("f", "https://h.example/f?accessToken=SPELLED-F6"),
    (
        "g",
        "https://h.example/f?authToken=SPELLED-G7&clientSecret=SPELLED-G8",
    ),
    ("h", "https://h.example/f?x-auth-token=SPELLED-H9"),
    (
        "i",
        "https://maps.example/api?key=AIzaSPELLED-I10abcdefghijklmnopqrstuvwx",
    ),
    (
        "j",
        "https://app.example/callback?code=SPELLED-J11&state=xyz",
    ),
    ("k", "https://h.example/f?key=plain-name&x=1"),
];

fn assert_no_spelled_secret(what: &str, bytes: &[u8]) {
    let text = String::from_utf8_lossy(bytes);
    assert!(!text.contains("SPELLED-"), "{what} shows a token:\n{text}");
}

#[test]
fn a_token_is_masked_by_any_spelling_of_its_name() {
    let params: String = SPELLED
        .iter()
        .map(|(name, url)| format!("  {name}: \"{url}\"\n"))
        .collect();
    // Through `env:`: URLs are no plain values for a command's text.
    let references: String = SPELLED
        .iter()
        .map(|(name, _)| format!(" \"${}\"", name.to_uppercase()))
        .collect();
    let env: Vec<String> = SPELLED
        .iter()
        .map(|(name, _)| format!("{}: \"${{params.{name}}}\"", name.to_uppercase()))
        .collect();
    let env = env.join(", ");
    let project = TestProject::new();
    project.write(
        "pipe.yaml",
        &format!(
            "params:\n{params}stages:\n  echo_urls:\n    run: printf '%s\\n'{references} | od -An -tx1 | tr -d ' \\n' > urls.hex\n    env: {{ {env} }}\n    outs: [urls.hex]\n"
        ),
    );
    let run = project.pipe(&["run", "-v"]);
    assert!(run.status.success(), "{run:?}");
    assert_no_spelled_secret("run -v", &run.stdout);
    assert_no_spelled_secret("run -v", &run.stderr);
    // The stage got every URL whole.
    let urls: String = SPELLED.iter().map(|(_, url)| format!("{url}\n")).collect();
    assert_eq!(project.read("urls.hex"), hex(&urls));
    for args in [
        vec!["show"],
        vec!["show", "--json"],
        vec!["runs", "--json"],
        vec!["why", "echo_urls"],
        vec!["status", "--json"],
        vec!["run", "--dry-run"],
    ] {
        let output = project.pipe(&args);
        assert!(output.status.success(), "{args:?}: {output:?}");
        assert_no_spelled_secret(&args.join(" "), &output.stdout);
        assert_no_spelled_secret(&args.join(" "), &output.stderr);
    }
    let mut files = 0;
    for_each_file(&project.path(".pipe"), &mut |path, bytes| {
        files += 1;
        assert_no_spelled_secret(&path.display().to_string(), bytes);
    });
    assert!(files > 5, "only {files} files under .pipe");
    // A `key` that is no Google API key is a name, kept as written.
    let shown = String::from_utf8_lossy(&project.pipe(&["show"]).stdout).into_owned();
    assert!(shown.contains("key=plain-name"), "{shown}");
}

fn for_each_file(dir: &Path, visit: &mut dyn FnMut(&Path, &[u8])) {
    for entry in std::fs::read_dir(dir).expect("read dir").flatten() {
        let path = entry.path();
        let kind = entry.file_type().expect("file type");
        if kind.is_dir() {
            for_each_file(&path, visit);
        } else if kind.is_file() {
            visit(&path, &std::fs::read(&path).expect("read file"));
        }
    }
}

#[test]
fn an_error_quoting_a_value_masks_the_credentials_in_it() {
    let project = TestProject::new();
    project.write(
        "pipe.yaml",
        "stages:\n  s:\n    matrix:\n      src: [\"https://u:SPELLED-PW@h.example/x\"]\n    run: echo ${matrix.src} > o.txt\n    outs: [o.txt]\n",
    );
    let output = project.pipe(&["run"]);
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("bad-matrix-value"), "{stderr}");
    assert!(stderr.contains("https://***@h.example/x"), "{stderr}");
    assert_no_spelled_secret("the bad-matrix-value error", &output.stderr);
}

#[test]
fn a_credential_from_pipes_environment_is_masked_in_every_line_shown_of_a_stage() {
    const SECRET: &str = "wJalrXUtnFEMI-K7MDENG-bPxRfiCYEXAMPLEKEY";
    let project = TestProject::new();
    project.write(
        "pipe.yaml",
        "stages:\n  dump:\n    run: echo \"key is $AWS_SECRET_ACCESS_KEY\"; echo token=$HF_TOKEN; touch ok.txt\n    outs: [ok.txt]\n  fail:\n    run: echo \"failing with $AWS_SECRET_ACCESS_KEY\"; exit 3\n",
    );
    let output = project
        .std_command()
        .env("AWS_SECRET_ACCESS_KEY", SECRET)
        .env("HF_TOKEN", "hf_abcdefghijklmnop")
        .args(["run", "--json"])
        .output()
        .unwrap();
    assert_eq!(
        output.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    for (what, bytes) in [("stderr", &output.stderr), ("stdout", &output.stdout)] {
        let text = String::from_utf8_lossy(bytes);
        assert!(!text.contains(SECRET), "{what} shows the secret:\n{text}");
        assert!(!text.contains("hf_abcdefghijklmnop"), "{what}:\n{text}");
    }
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("failing with ***"), "{stderr}");
    assert!(stderr.contains("key is ***"), "{stderr}");
}
