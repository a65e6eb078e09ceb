//! Writing to stdout and stderr without panicking (`println!` panics when
//! the write fails).
//!
//! A reader that goes away (`pipe runs | head -1`) ends pipe quietly with
//! exit code 141, the status a shell reports for `git log | head`, whose
//! git dies of SIGPIPE. Any other failure to write data (stdout on a full
//! disk, or no stdout at all: `pipe runs >&-`) ends pipe with an error on
//! stderr and exit code 3. `pipe run` does not end on the spot: its stages
//! are stopped as on Ctrl-C and the run is recorded as interrupted first.

use std::fmt;
use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use pipe_engine::ExitCode;

/// 128 + SIGPIPE: what a shell reports for a command whose reader left.
pub const READER_GONE: u8 = 141;

/// The first failed write of a run's output, if any.
static RUN_OUTPUT_FAILURE: Mutex<Option<io::Error>> = Mutex::new(None);

/// Whether pipe was started without a stdout (`pipe runs >&-`). Rust's
/// runtime opens /dev/null on a closed stdout before `main`, so that every
/// write would succeed and the data vanish; this is read before that, by
/// the function below, which the loader calls before the runtime starts.
static STDOUT_WAS_CLOSED: AtomicBool = AtomicBool::new(false);

extern "C" fn note_closed_stdout() {
    // SAFETY: F_GETFD on a descriptor number only asks whether it is open.
    if unsafe { libc::fcntl(libc::STDOUT_FILENO, libc::F_GETFD) } == -1 {
        STDOUT_WAS_CLOSED.store(true, Ordering::Relaxed);
    }
}

/// Run by the dynamic loader (glibc and musl both run `.init_array`)
/// before Rust's runtime replaces closed standard descriptors.
#[used]
#[link_section = ".init_array"]
static NOTE_CLOSED_STDOUT: extern "C" fn() = note_closed_stdout;

/// `print!` for human-readable data on stdout ([`shown`]); ends pipe if
/// stdout fails.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::output::print(format_args!($($arg)*))
    };
}

/// `eprintln!` for messages ([`shown`]); a closed stderr loses them, the
/// exit code still tells the outcome.
macro_rules! errln {
    ($($arg:tt)*) => {
        $crate::output::eprint(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `eprint!` for messages whose text ends its own lines ([`shown`]).
macro_rules! err {
    ($($arg:tt)*) => {
        $crate::output::eprint(format_args!($($arg)*))
    };
}

/// One JSON document or line on stdout, exactly as serialized (JSON
/// escapes every control character itself); ends pipe if stdout fails.
macro_rules! jsonln {
    ($value:expr) => {
        $crate::output::print_exact(format_args!("{}\n", $value))
    };
}

pub(crate) use {err, errln, jsonln, out};

/// What every human-readable line pipe writes goes through, once, here:
/// credentials in URLs masked (`pipe_protocol::redact`) and whatever a
/// terminal would obey escaped but pipe's own colours
/// (`pipe_protocol::terminal`). Names, argv, metric text and messages from
/// a pulled run record or a stage's stderr are data pipe did not write; no
/// renderer has to remember that.
pub fn shown(text: fmt::Arguments<'_>) -> String {
    let text = fmt::format(text);
    let masked = pipe_protocol::redact::redact_text(&text);
    match crate::terminal::terminal_safe_keeping_colour(&masked) {
        std::borrow::Cow::Borrowed(_) => match masked {
            std::borrow::Cow::Borrowed(_) => text,
            std::borrow::Cow::Owned(masked) => masked,
        },
        std::borrow::Cow::Owned(safe) => safe,
    }
}

/// Data written exactly as given (JSON), ending pipe if stdout fails.
pub fn print_exact(text: fmt::Arguments<'_>) {
    if let Err(error) = try_print_exact(text) {
        std::process::exit(i32::from(exit_code(&error)));
    }
}

pub fn print(text: fmt::Arguments<'_>) {
    if let Err(error) = try_print(text) {
        std::process::exit(i32::from(exit_code(&error)));
    }
}

/// stdout as an `io::Write`, for data written in pieces (a serializer
/// streaming a large document): a failure ends pipe as `print` does.
/// Wrap it in a `BufWriter`.
pub struct DataStdout;

impl Write for DataStdout {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let written = if STDOUT_WAS_CLOSED.load(Ordering::Relaxed) {
            Err(io::Error::from_raw_os_error(libc::EBADF))
        } else {
            io::stdout().lock().write_all(buf)
        };
        if let Err(error) = written {
            std::process::exit(i32::from(exit_code(&error)));
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        if let Err(error) = io::stdout().lock().flush() {
            std::process::exit(i32::from(exit_code(&error)));
        }
        Ok(())
    }
}

pub fn eprint(text: fmt::Arguments<'_>) {
    let _ = try_eprint(text);
}

/// Writes human-readable text ([`shown`]) and flushes, so that a failure
/// shows here and not, unnoticed, when pipe exits.
pub fn try_print(text: fmt::Arguments<'_>) -> io::Result<()> {
    try_print_shown(&shown(text))
}

/// Writes `text` (JSON) as it is but for credentials in URLs, which are
/// masked here too, and flushes. JSON escapes control characters itself.
pub fn try_print_exact(text: fmt::Arguments<'_>) -> io::Result<()> {
    if STDOUT_WAS_CLOSED.load(Ordering::Relaxed) {
        return Err(io::Error::from_raw_os_error(libc::EBADF));
    }
    let text = text.to_string();
    let masked = pipe_protocol::redact::redact_text(&text);
    let mut stdout = io::stdout().lock();
    stdout.write_all(masked.as_bytes())?;
    stdout.flush()
}

/// Writes text that [`shown`] already made safe, and flushes.
fn try_print_shown(text: &str) -> io::Result<()> {
    if STDOUT_WAS_CLOSED.load(Ordering::Relaxed) {
        return Err(io::Error::from_raw_os_error(libc::EBADF));
    }
    let mut stdout = io::stdout().lock();
    stdout.write_all(text.as_bytes())?;
    stdout.flush()
}

pub fn try_eprint(text: fmt::Arguments<'_>) -> io::Result<()> {
    io::stderr().lock().write_all(shown(text).as_bytes())
}

/// Where tracing's log lines go: stderr, through [`shown`] like every
/// other message (a log line quotes stage names, paths and errors).
pub struct ShownStderr;

impl Write for ShownStderr {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let text = String::from_utf8_lossy(buf);
        io::stderr()
            .lock()
            .write_all(shown(format_args!("{text}")).as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        io::stderr().lock().flush()
    }
}

/// For `pipe run`'s progress: remembers the first failure and stops the run
/// as Ctrl-C would, so its stages end and the run is recorded. A closed
/// stderr counts as a reader gone (`pipe run 2>&1 | head`); other stderr
/// failures are only lost messages.
pub fn run_output_failed(error: io::Error, on_stdout: bool) {
    if !on_stdout && error.kind() != io::ErrorKind::BrokenPipe {
        return;
    }
    let mut failure = RUN_OUTPUT_FAILURE
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if failure.is_none() {
        *failure = Some(error);
        pipe_engine::request_interrupt();
    }
}

/// The exit code for a command whose run output failed, if it did.
pub fn run_output_exit_code() -> Option<u8> {
    let failure = RUN_OUTPUT_FAILURE
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    failure.as_ref().map(exit_code)
}

/// 141 for a reader that left; otherwise says what failed, exit code 3.
fn exit_code(error: &io::Error) -> u8 {
    if error.kind() == io::ErrorKind::BrokenPipe {
        READER_GONE
    } else {
        eprint(format_args!("error: cannot write to stdout: {error}\n"));
        ExitCode::Environment as u8
    }
}
