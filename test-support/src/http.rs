//! The one HTTP/1.1 server on 127.0.0.1 for every test that downloads:
//! each connection answered once, then closed. What it answers is up to the
//! test: files by path, byte ranges, failures, bodies cut short or stalled,
//! or a body that never ends.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

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
    /// Send `body` again and again in chunked encoding, without a length,
    /// until the client hangs up.
    pub endless: bool,
    /// Send `body` (its whole length announced) one byte at a time, this
    /// long apart, until it is sent or the client hangs up.
    pub drip: Option<Duration>,
}

impl Reply {
    pub fn status(status: u16) -> Reply {
        Reply {
            status,
            headers: vec![],
            body: format!("status {status}\n").into_bytes(),
            cut_after: None,
            stall: Duration::ZERO,
            endless: false,
            drip: None,
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
            endless: false,
            drip: None,
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
                endless: false,
                drip: None,
            },
            Some(_) => Reply::status(416),
            None => Reply::whole(body),
        }
    }

    /// 200 with `chunk` repeated forever: a body past any limit.
    pub fn endless(chunk: &[u8]) -> Reply {
        Reply {
            endless: true,
            ..Reply::whole(chunk)
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

    /// `body`, a byte every `interval`.
    pub fn drip(mut self, interval: Duration) -> Reply {
        self.drip = Some(interval);
        self
    }
}

type Handler = dyn Fn(&Request, usize) -> Reply + Send + Sync;

pub struct Server {
    /// `http://127.0.0.1:PORT`, no trailing slash.
    pub base: String,
    port: u16,
    requests: Arc<Mutex<Vec<Request>>>,
}

impl Server {
    /// `handler` gets each request and how many requests for the same path
    /// came before it.
    pub fn start(handler: impl Fn(&Request, usize) -> Reply + Send + Sync + 'static) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1");
        let address = listener.local_addr().expect("local addr");
        let base = format!("http://{address}");
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
        Server {
            base,
            port: address.port(),
            requests,
        }
    }

    /// Answers the files in `files` by path (query included, so a URL
    /// altered on the way gets a 404) and anything else with a 404.
    pub fn serving(files: HashMap<String, Vec<u8>>) -> Server {
        Server::start(move |request, _| match files.get(&request.path) {
            Some(body) => Reply::whole(body),
            None => Reply::status(404),
        })
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub fn port(&self) -> u16 {
        self.port
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
    if reply.endless {
        head.push_str("Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n");
        if stream.write_all(head.as_bytes()).is_err() {
            return;
        }
        while write!(stream, "{:x}\r\n", reply.body.len())
            .and_then(|()| stream.write_all(&reply.body))
            .and_then(|()| stream.write_all(b"\r\n"))
            .is_ok()
        {}
        return;
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
    if let Some(interval) = reply.drip {
        for byte in body {
            std::thread::sleep(interval);
            if stream.write_all(&[*byte]).is_err() {
                return;
            }
        }
    } else {
        let _ = stream.write_all(body);
    }
    let _ = stream.flush();
    std::thread::sleep(reply.stall);
    let _ = stream.shutdown(Shutdown::Both);
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        206 => "Partial Content",
        302 => "Found",
        307 => "Temporary Redirect",
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
