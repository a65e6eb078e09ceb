//! Terminal colour, off for pipes and when `NO_COLOR` is set.

use std::io::IsTerminal;

#[derive(Debug, Clone, Copy)]
pub struct Style {
    enabled: bool,
}

impl Style {
    pub fn for_stderr() -> Style {
        Style::new(std::io::stderr().is_terminal())
    }

    pub fn for_stdout() -> Style {
        Style::new(std::io::stdout().is_terminal())
    }

    fn new(terminal: bool) -> Style {
        let no_color = std::env::var_os("NO_COLOR").is_some_and(|value| !value.is_empty());
        Style {
            enabled: terminal && !no_color,
        }
    }

    /// No colour whatever stderr is: for tests of rendered lines.
    #[cfg(test)]
    pub fn plain() -> Style {
        Style { enabled: false }
    }

    fn paint(&self, code: &str, text: &str) -> String {
        if self.enabled {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_string()
        }
    }

    pub fn red(&self, text: &str) -> String {
        self.paint("31", text)
    }
    pub fn green(&self, text: &str) -> String {
        self.paint("32", text)
    }
    pub fn yellow(&self, text: &str) -> String {
        self.paint("33", text)
    }
    pub fn cyan(&self, text: &str) -> String {
        self.paint("36", text)
    }
    pub fn dim(&self, text: &str) -> String {
        self.paint("2", text)
    }
}
