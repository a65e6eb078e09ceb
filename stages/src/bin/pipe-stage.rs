//! `pipe-stage`: the worker that runs pipe's built-in stages.
//!
//! `pipe-stage describe` prints the catalog (JSON); `pipe-stage run
//! --invocation FILE` runs one stage. See docs/stage-protocol.md.

use std::process::ExitCode;

use pipe_protocol::{Event, Invocation, PROTOCOL_VERSION};
use pipe_stages::{builtins, StageContext};

// Tokenizing spends about a quarter of its time in malloc/free; mimalloc
// made the tokenize stage 1.18x faster (docs/performance.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const USAGE: &str = "usage: pipe-stage describe | pipe-stage run --invocation FILE";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["describe"] => {
            let catalog: Vec<_> = builtins::all().iter().map(|stage| stage.info()).collect();
            match serde_json::to_string_pretty(&catalog) {
                Ok(text) => {
                    println!("{text}");
                    ExitCode::SUCCESS
                }
                Err(error) => {
                    eprintln!("error: {error}");
                    ExitCode::from(101)
                }
            }
        }
        ["run", "--invocation", file] => run(file),
        ["--version"] => {
            println!(
                "pipe-stage {} (protocol {PROTOCOL_VERSION})",
                env!("CARGO_PKG_VERSION")
            );
            ExitCode::SUCCESS
        }
        _ => {
            eprintln!("{USAGE}");
            ExitCode::from(2)
        }
    }
}

fn fail(message: String, hint: Option<String>) -> ExitCode {
    pipe_stages::emit(&Event::Error { message, hint });
    ExitCode::from(1)
}

fn run(file: &str) -> ExitCode {
    let text = match std::fs::read_to_string(file) {
        Ok(text) => text,
        Err(error) => return fail(format!("cannot read invocation `{file}`: {error}"), None),
    };
    let invocation: Invocation = match serde_json::from_str(&text) {
        Ok(invocation) => invocation,
        Err(error) => return fail(format!("invalid invocation `{file}`: {error}"), None),
    };
    if invocation.protocol != PROTOCOL_VERSION {
        return fail(
            format!(
                "invocation uses protocol {}, this worker speaks {PROTOCOL_VERSION}",
                invocation.protocol
            ),
            Some("rebuild pipe and pipe-stage from the same source".into()),
        );
    }
    let Some(stage) = builtins::find(&invocation.uses, invocation.version) else {
        return fail(
            format!(
                "this worker has no stage `{}@{}`",
                invocation.uses, invocation.version
            ),
            Some("`pipe stages` lists the built-in stages".into()),
        );
    };
    let info = stage.info();
    let params = match pipe_protocol::check_params(&info, &invocation.params) {
        Ok(params) => params,
        Err(problems) => {
            let first = &problems[0];
            return fail(first.message.clone(), Some(first.hint.clone()));
        }
    };
    let mut invocation = invocation;
    invocation.params = params;
    if let Err(error) = std::fs::create_dir_all(&invocation.output_dir) {
        return fail(
            format!(
                "cannot create `{}`: {error}",
                invocation.output_dir.display()
            ),
            None,
        );
    }
    let context = StageContext::new(invocation);
    match stage.run(&context) {
        Ok(()) => {
            pipe_stages::emit(&Event::Done);
            ExitCode::SUCCESS
        }
        Err(error) => fail(error.to_string(), error.hint().map(String::from)),
    }
}
