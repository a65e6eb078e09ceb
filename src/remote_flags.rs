//! The remote a command's flags name (`--remote`, `--remote-read-only`)
//! and how its transfers are shown: what `pipe cache push|pull|status`
//! and `pipe cache gc` share, so that neither command imports the other.

use std::path::Path;

use pipe_engine::RemoteChoice;

use crate::cli::RemoteArgs;
use crate::transfers;

/// How a command's transfers are shown: `--json` events on stdout, and
/// bars or lines on stderr unless `--quiet`.
#[derive(Debug, Clone, Copy)]
pub struct Shown {
    pub json: bool,
    pub quiet: bool,
}

/// The remote a command's flags name, its transfers shown as `shown`
/// says, or not at all.
pub fn choice<'a>(
    file: Option<&'a Path>,
    args: &'a RemoteArgs,
    shown: Option<Shown>,
) -> RemoteChoice<'a> {
    RemoteChoice {
        file,
        flag: args.remote.as_deref(),
        read_only: args.remote_read_only,
        transfers: shown.and_then(|shown| {
            transfers::sink(
                shown.json,
                shown.quiet,
                transfers::terminal_bars(shown.quiet),
            )
        }),
    }
}
