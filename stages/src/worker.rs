//! The worker side of the stage protocol, shared by the worker binaries:
//! `pipe-stage` (data stages, no libtorch: starts in milliseconds) and
//! `pipe-stage-train` (training and evaluation, feature `torch`: links
//! libtorch, which alone costs about 0.35 s of start-up).

use std::process::ExitCode;

use pipe_protocol::{Event, Invocation, PROTOCOL_VERSION};

use crate::{BuiltinStage, StageContext};

/// Runs a worker that offers `stages`: `describe`, `run --invocation FILE`
/// or `--version`, as the stage protocol defines them.
pub fn main(name: &str, stages: &[&'static dyn BuiltinStage]) -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["describe"] => {
            let catalog: Vec<_> = stages.iter().map(|stage| stage.info()).collect();
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
        ["run", "--invocation", file] => run(stages, file),
        ["--version"] => {
            println!(
                "pipe-stage {} (protocol {PROTOCOL_VERSION})",
                env!("CARGO_PKG_VERSION")
            );
            ExitCode::SUCCESS
        }
        _ => {
            eprintln!("usage: {name} describe | {name} run --invocation FILE");
            ExitCode::from(2)
        }
    }
}

fn fail(message: String, hint: Option<String>) -> ExitCode {
    crate::emit(&Event::Error { message, hint });
    ExitCode::from(1)
}

fn run(stages: &[&'static dyn BuiltinStage], file: &str) -> ExitCode {
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
    let Some(stage) = stages.iter().copied().find(|stage| {
        let info = stage.info();
        info.name == invocation.uses && info.version == invocation.version
    }) else {
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
            crate::emit(&Event::Done);
            ExitCode::SUCCESS
        }
        Err(error) => fail(error.to_string(), error.hint().map(String::from)),
    }
}
