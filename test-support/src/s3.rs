//! A real S3 server on 127.0.0.1 for the remote-cache tests: `s3s-fs`
//! (installed by scripts/install-s3.sh), which checks request signatures,
//! honours If-None-Match and keeps each bucket as a plain directory, so a
//! test can look at (and damage) exactly what the remote holds.

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const ACCESS_KEY: &str = "pipe-test-access";
pub const SECRET_KEY: &str = "pipe-test-secret-0123456789";
pub const BUCKET: &str = "pipe-cache";

pub struct Server {
    pub port: u16,
    /// The directory of the buckets, and the temporary directory that
    /// holds it when this server owns it (a public view shares another's).
    root: PathBuf,
    _data: Option<tempfile::TempDir>,
    /// Whether requests must be signed with `ACCESS_KEY`.
    signed: bool,
    child: Option<Child>,
}

/// The `s3s-fs` binary: `S3S_FS`, then cargo's bin directory, then PATH.
fn binary() -> PathBuf {
    if let Some(path) = std::env::var_os("S3S_FS") {
        return PathBuf::from(path);
    }
    let cargo_home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cargo")));
    if let Some(candidate) = cargo_home.map(|home| home.join("bin/s3s-fs")) {
        if candidate.is_file() {
            return candidate;
        }
    }
    PathBuf::from("s3s-fs")
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .expect("a free port on 127.0.0.1")
}

impl Server {
    /// Starts a server with one empty bucket, `BUCKET`.
    pub fn start() -> Server {
        let data = tempfile::tempdir().expect("temp dir");
        std::fs::create_dir_all(data.path().join(BUCKET)).expect("bucket dir");
        let mut server = Server {
            port: free_port(),
            root: data.path().to_path_buf(),
            _data: Some(data),
            signed: true,
            child: None,
        };
        server.restart();
        server
    }

    /// A second server over this one's buckets that answers unsigned
    /// requests: what a bucket whose policy grants anyone `s3:GetObject`
    /// and `s3:ListBucket` is to a job without credentials. (`s3s-fs` has
    /// no bucket policies: started without keys it takes any request,
    /// writes too, so a test checks what was written itself.)
    pub fn public_view(&self) -> Server {
        let mut server = Server {
            port: free_port(),
            root: self.root.clone(),
            _data: None,
            signed: false,
            child: None,
        };
        server.restart();
        server
    }

    /// Starts (again) on the same port and data: the remote comes back.
    pub fn restart(&mut self) {
        self.stop();
        let mut command = Command::new(binary());
        command
            .args(["--host", "127.0.0.1", "--port"])
            .arg(self.port.to_string());
        if self.signed {
            command.args(["--access-key", ACCESS_KEY, "--secret-key", SECRET_KEY]);
        }
        let child = command
            .arg(&self.root)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|error| {
                panic!(
                    "cannot start s3s-fs ({error}); run scripts/install-s3.sh, which \
                     builds it once with cargo install"
                )
            });
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "s3s-fs did not listen within 20 s"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Stops the server (kill -9): requests fail with connection refused.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// The server's pid, for a stage that kills it mid-run.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(Child::id).expect("server running")
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// `s3://BUCKET/prefix`.
    pub fn url(&self, prefix: &str) -> String {
        format!("s3://{BUCKET}/{prefix}")
    }

    /// The environment a `pipe` needs to reach this server as `url(prefix)`.
    pub fn env(&self, prefix: &str) -> Vec<(String, String)> {
        vec![
            ("PIPE_REMOTE".into(), self.url(prefix)),
            ("PIPE_REMOTE_ENDPOINT".into(), self.endpoint()),
            ("AWS_ACCESS_KEY_ID".into(), ACCESS_KEY.into()),
            ("AWS_SECRET_ACCESS_KEY".into(), SECRET_KEY.into()),
            ("AWS_REGION".into(), "us-east-1".into()),
        ]
    }

    /// The bucket's directory: what the remote holds, as files.
    pub fn bucket_dir(&self) -> PathBuf {
        self.root.join(BUCKET)
    }

    /// Every file in the bucket, relative to it, sorted.
    pub fn files(&self) -> Vec<String> {
        let mut found = Vec::new();
        collect(&self.bucket_dir(), &self.bucket_dir(), &mut found);
        found.sort();
        found
    }
}

fn collect(root: &Path, dir: &Path, found: &mut Vec<String>) {
    let Ok(listing) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in listing.flatten() {
        let path = entry.path();
        if path.is_dir() {
            collect(root, &path, found);
        } else {
            found.push(
                path.strip_prefix(root)
                    .unwrap_or(&path)
                    .to_string_lossy()
                    .into_owned(),
            );
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}
