//! The HTTP client of an S3 remote, bounded against the server: whoever
//! answers at the endpoint chooses how much it sends and how fast, so
//! every request the operator makes (reads, writes, listings, the error
//! bodies opendal reads whole) goes through here, where:
//! - an answer past [`untrusted::HTTP_ANSWER`] is cut off with an error
//!   (opendal buffers a listing page or an error body whole: an endless
//!   one would grow without end);
//! - a request and its answer have a deadline that only bytes moving at
//!   [`MIN_RATE`] push back: [`Bounds::floor`] seconds, plus one for each
//!   `MIN_RATE` bytes sent or received. A server dripping a byte a second
//!   keeps a transfer no longer than the floor; the layers' stall timeout,
//!   which every byte resets, never fires on one;
//! - no redirect is followed, and one is refused with an error: the
//!   request's credentials (`x-amz-security-token` among its headers) go
//!   to the configured endpoint and nowhere else, and no other host's
//!   answer is taken.
//!
//! These errors are not temporary: a server that drips or floods is not
//! asked again, and the run goes on without the remote.

use std::future::Future;
use std::pin::Pin;
use std::sync::OnceLock;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::Stream;
use opendal::{Buffer, Error, ErrorKind, HttpBody, HttpTransport, HttpTransporter};
use opendal_http_transport_reqwest::ReqwestTransport;
use tokio::time::{Instant, Sleep};

use crate::untrusted;

/// The least throughput a request keeps up once past the floor, in bytes
/// a second. The requests in flight share the link: up to `concurrency`
/// objects of 4 ranges each, 32 by default, so a 2 Mbit/s link gives each
/// about this much when all are busy. A server feeding this slowly holds
/// one answer (16 MiB at most) for 34 minutes; one dripping bytes, for the
/// floor.
pub(super) const MIN_RATE: u64 = 8 * 1024;

/// The floor of every deadline, when `PIPE_REMOTE_DEADLINE_S` does not set it.
const DEFAULT_FLOOR: Duration = Duration::from_secs(30);

/// The variable that sets the floor, in seconds (tests set it small).
pub const DEADLINE_VARIABLE: &str = "PIPE_REMOTE_DEADLINE_S";

/// How long a request may take: `floor`, plus a second for each
/// `MIN_RATE` bytes moved; an answer holds at most `max_answer` bytes.
#[derive(Debug, Clone, Copy)]
pub(super) struct Bounds {
    pub(super) floor: Duration,
    pub(super) max_answer: u64,
}

impl Bounds {
    fn from_env() -> Bounds {
        let floor = std::env::var(DEADLINE_VARIABLE)
            .ok()
            .and_then(|text| text.trim().parse::<f64>().ok())
            .filter(|seconds| seconds.is_finite() && *seconds > 0.0 && *seconds < 1e9)
            .map(Duration::from_secs_f64)
            .unwrap_or(DEFAULT_FLOOR);
        Bounds {
            floor,
            max_answer: untrusted::HTTP_ANSWER.bytes,
        }
    }

    /// When a request that started at `start` and has moved `bytes` must
    /// be done.
    fn deadline(&self, start: Instant, bytes: u64) -> Instant {
        start + self.floor + Duration::from_secs(bytes / MIN_RATE)
    }
}

/// The process's one bounded transport, made on first use (the reqwest
/// client itself on the first request, so a run that never reaches the
/// remote never builds it).
pub(super) fn transporter() -> HttpTransporter {
    static TRANSPORTER: OnceLock<HttpTransporter> = OnceLock::new();
    TRANSPORTER
        .get_or_init(|| {
            let transporter = HttpTransporter::new(Bounded {
                bounds: Bounds::from_env(),
                client: OnceLock::new(),
            });
            // What opendal reaches without the operator's context (the
            // region probe, an assumed role's STS) is bounded too.
            HttpTransporter::install_default(transporter.clone());
            transporter
        })
        .clone()
}

struct Bounded {
    bounds: Bounds,
    client: OnceLock<Result<ReqwestTransport, String>>,
}

impl Bounded {
    fn client(&self) -> Result<&ReqwestTransport, Error> {
        self.client
            .get_or_init(|| {
                reqwest::Client::builder()
                    .redirect(reqwest::redirect::Policy::none())
                    .build()
                    .map(ReqwestTransport::new)
                    .map_err(|error| error.to_string())
            })
            .as_ref()
            .map_err(|detail| {
                Error::new(
                    ErrorKind::Unexpected,
                    format!("cannot make the HTTP client: {detail}"),
                )
            })
    }
}

impl HttpTransport for Bounded {
    async fn fetch(
        &self,
        request: http::Request<Buffer>,
    ) -> opendal::Result<http::Response<HttpBody>> {
        let client = self.client()?;
        let start = Instant::now();
        let sent = request.body().len() as u64;
        let bounds = self.bounds;
        let deadline = bounds.deadline(start, sent);
        let response = match tokio::time::timeout_at(deadline, client.fetch(request)).await {
            Ok(response) => response?,
            Err(_) => return Err(too_slow(&bounds, start, 0)),
        };
        let status = response.status();
        if status.is_redirection() && status != http::StatusCode::NOT_MODIFIED {
            return Err(Error::new(
                ErrorKind::Unexpected,
                format!(
                    "the server answered {status}; pipe follows no redirect, so that \
                     credentials reach the configured endpoint only"
                ),
            ));
        }
        Ok(response.map(|body| {
            body.map_inner(move |inner| {
                Box::new(BoundedBody {
                    inner,
                    bounds,
                    start,
                    sent,
                    received: 0,
                    timer: Box::pin(tokio::time::sleep_until(deadline)),
                    failed: None,
                })
            })
        }))
    }
}

type Inner = Box<dyn Stream<Item = opendal::Result<Buffer>> + Send + Sync + Unpin + 'static>;

/// An answer's body, cut off past its size limit or its deadline.
struct BoundedBody {
    inner: Inner,
    bounds: Bounds,
    start: Instant,
    sent: u64,
    received: u64,
    /// Armed at a deadline that may since have moved later: when it fires,
    /// the deadline is worked out again (cheaper than moving it per chunk).
    timer: Pin<Box<Sleep>>,
    /// Why the body was cut off: every later poll says it again.
    failed: Option<String>,
}

impl BoundedBody {
    fn fail(&mut self, error: Error) -> Poll<Option<opendal::Result<Buffer>>> {
        self.failed = Some(error.message().to_string());
        Poll::Ready(Some(Err(error)))
    }
}

impl Stream for BoundedBody {
    type Item = opendal::Result<Buffer>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if let Some(message) = &this.failed {
            return Poll::Ready(Some(Err(Error::new(
                ErrorKind::Unexpected,
                message.clone(),
            ))));
        }
        match Pin::new(&mut this.inner).poll_next(cx) {
            Poll::Ready(Some(Ok(buffer))) => {
                this.received += buffer.len() as u64;
                if this.received > this.bounds.max_answer {
                    return this.fail(Error::new(
                        ErrorKind::Unexpected,
                        format!(
                            "the server's answer is longer than {}, the most pipe reads of \
                             one (docs/cache-format.md, Limits)",
                            untrusted::human(this.bounds.max_answer)
                        ),
                    ));
                }
                Poll::Ready(Some(Ok(buffer)))
            }
            Poll::Ready(other) => Poll::Ready(other),
            Poll::Pending => loop {
                match this.timer.as_mut().poll(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(()) => {
                        let deadline = this.bounds.deadline(this.start, this.sent + this.received);
                        if Instant::now() >= deadline {
                            let error = too_slow(&this.bounds, this.start, this.received);
                            return this.fail(error);
                        }
                        // Polled again by the loop, which registers the waker.
                        this.timer.as_mut().reset(deadline);
                    }
                }
            },
        }
    }
}

fn too_slow(bounds: &Bounds, start: Instant, received: u64) -> Error {
    Error::new(
        ErrorKind::Unexpected,
        format!(
            "the server sent {received} bytes in {:.0} s, slower than pipe waits for \
             ({} s, then {} a second; {DEADLINE_VARIABLE} sets the seconds)",
            start.elapsed().as_secs_f64(),
            bounds.floor.as_secs_f64(),
            untrusted::human(MIN_RATE),
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deadline_moves_only_with_bytes_at_the_least_rate() {
        let bounds = Bounds {
            floor: Duration::from_secs(30),
            max_answer: 1 << 20,
        };
        let start = Instant::now();
        assert_eq!(bounds.deadline(start, 0), start + Duration::from_secs(30));
        // A drip of a byte a second for a minute buys nothing.
        assert_eq!(bounds.deadline(start, 60), start + Duration::from_secs(30));
        assert_eq!(
            bounds.deadline(start, 8 << 20),
            start + Duration::from_secs(30 + 1024)
        );
    }
}
