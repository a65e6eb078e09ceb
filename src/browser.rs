//! `pipe show --open`'s last step: a file opened where a person can see
//! it, with `$BROWSER` when it is set, else with the desktop's opener when
//! there is a display. Nothing without either (a terminal over SSH, CI,
//! tests): the path printed is the answer.

use std::path::Path;
use std::process::{Command, Stdio};

/// Starts the opener on `path`, not waited for (a browser may stay
/// open); an opener that cannot start is the error.
pub fn open(path: &Path) -> std::io::Result<()> {
    let browser = std::env::var("BROWSER")
        .ok()
        .and_then(|list| list.split(':').next().map(str::to_string))
        .filter(|command| !command.trim().is_empty());
    let mut command = match browser {
        // `$BROWSER` is a command line of the user's: the shell reads it,
        // and the path is its argument, never part of its text.
        Some(browser) => {
            let mut command = Command::new("sh");
            command
                .arg("-c")
                .arg(format!("{browser} \"$1\""))
                .arg("sh")
                .arg(path);
            command
        }
        None if has_display() => {
            let mut command = Command::new(if cfg!(target_os = "macos") {
                "open"
            } else {
                "xdg-open"
            });
            command.arg(path);
            command
        }
        None => return Ok(()),
    };
    command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map(drop)
}

fn has_display() -> bool {
    ["DISPLAY", "WAYLAND_DISPLAY"]
        .iter()
        .any(|name| std::env::var_os(name).is_some_and(|value| !value.is_empty()))
}
