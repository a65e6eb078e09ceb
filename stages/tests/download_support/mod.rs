//! A small HTTP/1.1 server on 127.0.0.1 for the download tests (each
//! connection answered once, then closed), and a runner for the worker.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pipe_protocol::{Invocation, PROTOCOL_VERSION};
use serde_json::Value;

#[derive(Debug, Clone)]
pub struct Request {
    pub method: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
}

impl Request {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    }

    /// N of `Range: bytes=N-`.
    pub fn range_start(&self) -> Option<usize> {
        self.header("range")?
            .strip_prefix("bytes=")?
            .strip_suffix('-')?
            .parse()
            .ok()
    }
}

pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// Announce the whole body but close the connection after this many bytes.
    pub cut_after: Option<usize>,
    /// Keep the connection open this long after writing, sending nothing.
    pub stall: Duration,
}

impl Reply {
    pub fn status(status: u16) -> Reply {
        Reply {
            status,
            headers: vec![],
            body: format!("status {status}\n").into_bytes(),
            cut_after: None,
            stall: Duration::ZERO,
        }
    }

    /// 200 with the whole body, whatever the request's Range.
    pub fn whole(body: &[u8]) -> Reply {
        Reply {
            status: 200,
            headers: vec![],
            body: body.to_vec(),
            cut_after: None,
            stall: Duration::ZERO,
        }
    }

    /// Honours `Range: bytes=N-` with a 206 and its Content-Range.
    pub fn ranged(request: &Request, body: &[u8]) -> Reply {
        match request.range_start() {
            Some(start) if start < body.len() => Reply {
                status: 206,
                headers: vec![(
                    "Content-Range".into(),
                    format!("bytes {start}-{}/{}", body.len() - 1, body.len()),
                )],
                body: body[start..].to_vec(),
                cut_after: None,
                stall: Duration::ZERO,
            },
            Some(_) => Reply::status(416),
            None => Reply::whole(body),
        }
    }

    pub fn header(mut self, name: &str, value: &str) -> Reply {
        self.headers.push((name.into(), value.into()));
        self
    }

    pub fn cut_after(mut self, bytes: usize) -> Reply {
        self.cut_after = Some(bytes);
        self
    }

    pub fn stall(mut self, time: Duration) -> Reply {
        self.stall = time;
        self
    }
}

type Handler = dyn Fn(&Request, usize) -> Reply + Send + Sync;

pub struct Server {
    pub base: String,
    requests: Arc<Mutex<Vec<Request>>>,
}

impl Server {
    /// `handler` gets each request and how many requests for the same path
    /// came before it.
    pub fn start(handler: impl Fn(&Request, usize) -> Reply + Send + Sync + 'static) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1");
        let base = format!("http://{}", listener.local_addr().expect("local addr"));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let handler: Arc<Handler> = Arc::new(handler);
        let seen = Arc::clone(&requests);
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let handler = Arc::clone(&handler);
                let seen = Arc::clone(&seen);
                std::thread::spawn(move || serve(stream, &*handler, &seen));
            }
        });
        Server { base, requests }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub fn requests(&self) -> Vec<Request> {
        self.requests.lock().unwrap().clone()
    }
}

fn serve(stream: TcpStream, handler: &Handler, seen: &Mutex<Vec<Request>>) {
    let mut reader = BufReader::new(stream.try_clone().expect("clone stream"));
    let mut line = String::new();
    if reader.read_line(&mut line).unwrap_or(0) == 0 {
        return;
    }
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or("").to_string();
    let path = parts.next().unwrap_or("").to_string();
    let mut headers = Vec::new();
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header).unwrap_or(0) == 0 || header.trim().is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':') {
            headers.push((name.trim().to_string(), value.trim().to_string()));
        }
    }
    let request = Request {
        method,
        path,
        headers,
    };
    let earlier = {
        let mut seen = seen.lock().unwrap();
        let earlier = seen.iter().filter(|r| r.path == request.path).count();
        seen.push(request.clone());
        earlier
    };
    let reply = handler(&request, earlier);
    let mut stream = stream;
    let mut head = format!("HTTP/1.1 {} {}\r\n", reply.status, reason(reply.status));
    for (name, value) in &reply.headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str(&format!(
        "Content-Length: {}\r\nConnection: close\r\n\r\n",
        reply.body.len()
    ));
    let body = match reply.cut_after {
        Some(cut) => &reply.body[..cut.min(reply.body.len())],
        None => &reply.body[..],
    };
    let _ = stream.write_all(head.as_bytes());
    let _ = stream.write_all(body);
    let _ = stream.flush();
    std::thread::sleep(reply.stall);
    let _ = stream.shutdown(Shutdown::Both);
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        206 => "Partial Content",
        302 => "Found",
        404 => "Not Found",
        416 => "Range Not Satisfiable",
        503 => "Service Unavailable",
        _ => "Status",
    }
}

/// A URL on a port nobody listens on.
pub fn unreachable_url(path: &str) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1");
    let address = listener.local_addr().expect("local addr");
    drop(listener);
    format!("http://{address}{path}")
}

/// Deterministic bytes that are not all alike, so a shifted resume shows.
pub fn payload(len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| ((i * 7919) % 251) as u8 ^ (i / 251) as u8)
        .collect()
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(bytes))
}

pub struct Run {
    pub code: i32,
    pub events: Vec<Value>,
    pub stderr: String,
    pub output_dir: PathBuf,
    pub dir: tempfile::TempDir,
}

impl Run {
    pub fn last_event(&self) -> &Value {
        self.events.last().expect("the worker printed events")
    }

    /// (message, hint) of the error event.
    pub fn error(&self) -> (String, String) {
        let last = self.last_event();
        assert_eq!(
            last["event"], "error",
            "expected an error, got {last}; stderr: {}",
            self.stderr
        );
        (
            last["message"].as_str().unwrap_or("").to_string(),
            last["hint"].as_str().unwrap_or("").to_string(),
        )
    }

    pub fn assert_done(&self) {
        let last = self.last_event();
        assert_eq!(
            last["event"], "done",
            "expected done, got {last}; events: {:?}",
            self.events
        );
        assert_eq!(self.code, 0);
    }

    pub fn messages(&self) -> Vec<String> {
        self.events
            .iter()
            .filter(|e| e["event"] == "message")
            .filter_map(|e| e["text"].as_str().map(String::from))
            .collect()
    }

    pub fn metrics(&self) -> Value {
        let text =
            std::fs::read_to_string(self.output_dir.join("metrics.json")).expect("metrics.json");
        serde_json::from_str(&text).expect("metrics.json is JSON")
    }
}

/// Runs `uses@1` with `params` in the worker, hermetic from the HF and
/// proxy settings of whoever runs the tests; `env` is added on top.
pub fn run_stage(uses: &str, params: Value, env: &[(&str, &str)]) -> Run {
    let dir = tempfile::tempdir().expect("tempdir");
    let output_dir = dir.path().join("out");
    let invocation = Invocation {
        protocol: PROTOCOL_VERSION,
        stage: "test".into(),
        uses: uses.into(),
        version: 1,
        params: params.as_object().expect("params are a mapping").clone(),
        output_dir: output_dir.clone(),
        scratch_dir: dir.path().join("scratch"),
        project_root: dir.path().to_path_buf(),
        devices: vec![],
        threads: 1,
    };
    let file = dir.path().join("invocation.json");
    std::fs::write(&file, serde_json::to_string(&invocation).unwrap()).unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_pipe-stage"));
    command.args(["run", "--invocation"]).arg(&file);
    for name in [
        "HF_ENDPOINT",
        "HF_HUB_CACHE",
        "HF_TOKEN",
        "HUGGING_FACE_HUB_TOKEN",
        "http_proxy",
        "https_proxy",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "all_proxy",
    ] {
        command.env_remove(name);
    }
    command.env("HF_HOME", dir.path().join("hf-home"));
    for (name, value) in env {
        command.env(name, value);
    }
    let output = command.output().expect("run pipe-stage");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let events = stdout
        .lines()
        .map(|line| {
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not a JSON event: {line}: {e}"))
        })
        .collect();
    Run {
        code: output.status.code().unwrap_or(-1),
        events,
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        output_dir,
        dir,
    }
}
