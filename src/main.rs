//! `pipe`: the command-line front end. Parses arguments, sets up logging,
//! runs one command and maps its outcome to a documented exit code
//! (docs/cli.md). Everything else lives in the `pipe-engine` and
//! `pipe-cache` crates.

mod browser;
mod cli;
mod commands;
mod complete;
mod here;
mod human_reporter;
mod json_reporter;
mod output;
mod progress;
mod remote_flags;
mod reporter;
mod run_setup;
mod run_tally;
mod style;
mod terminal;
mod transfers;
mod views;
mod worker_build_view;

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;
use pipe_engine::EngineError;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

use crate::output::errln;

// A no-op spent about a third of its instructions in glibc's malloc and
// free (loading the pipeline, decoding cached results); mimalloc, already
// the data worker's allocator, cuts that (docs/performance.md, "The no-op
// in 10 ms").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    // `COMPLETE=SHELL pipe -- WORDS` is the shell asking for candidates.
    complete::answer_if_asked();
    let cli = match cli::Cli::try_parse() {
        Ok(cli) => cli,
        // Help and version are data on stdout like any command's, so a
        // closed or full stdout fails them the same way (clap would drop
        // the error). On a terminal clap prints them in colour.
        Err(error) if !error.use_stderr() && !std::io::stdout().is_terminal() => {
            output::print(format_args!("{}", error.render()));
            return ExitCode::SUCCESS;
        }
        Err(error) => error.exit(),
    };
    init_logging(cli.verbose, cli.quiet);
    human_reporter::show_every_stage(cli.verbose > 0);
    pipe_engine::install_interrupt_handlers();
    if let Some(directory) = &cli.directory {
        if let Err(error) = std::env::set_current_dir(directory) {
            errln!(
                "error: cannot change to directory `{}`: {error}",
                directory.display()
            );
            return ExitCode::from(pipe_engine::ExitCode::InvalidInput as u8);
        }
    }
    let outcome = commands::dispatch(cli);
    if let Some(code) = output::run_output_exit_code() {
        return ExitCode::from(code);
    }
    match outcome {
        Ok(code) => ExitCode::from(code as u8),
        Err(error) => {
            report_error(&error);
            ExitCode::from(error.exit_code() as u8)
        }
    }
}

fn report_error(error: &EngineError) {
    let style = style::Style::for_stderr();
    match error {
        // Diagnostics carry their own `error[code]:` headers.
        EngineError::Spec(_) => errln!("{error}"),
        _ => {
            let text = error.to_string();
            let mut lines = text.lines();
            if let Some(first) = lines.next() {
                errln!("{} {first}", style.red("error:"));
            }
            for line in lines {
                errln!("{line}");
            }
        }
    }
}

fn init_logging(verbose: u8, quiet: bool) {
    let default = if quiet {
        "error"
    } else {
        match verbose {
            0 => "warn",
            1 => "info",
            _ => "debug",
        }
    };
    // The storage client's own retries and failures are summarised by pipe
    // in one warning; PIPE_LOG shows them in full.
    let default = format!("{default},opendal=error,reqsign=error,reqwest=error,hyper=error");
    // Targets and levels (`debug`, `pipe_engine=trace`): what PIPE_LOG is
    // for, without the regex engine EnvFilter's span and field matching
    // would add to every build of pipe.
    let filter: Targets = std::env::var("PIPE_LOG")
        .ok()
        .and_then(|filter| filter.parse().ok())
        .unwrap_or_else(|| default.parse().unwrap_or_default());
    let color = std::env::var_os("NO_COLOR").is_none_or(|value| value.is_empty())
        && std::io::IsTerminal::is_terminal(&std::io::stderr());
    tracing_subscriber::fmt()
        .with_writer(|| output::ShownStderr)
        .with_ansi(color)
        .with_target(false)
        .without_time()
        .with_max_level(tracing::Level::TRACE)
        .finish()
        .with(filter)
        .init();
}
