//! Renders an HTML file in a real headless Chromium, as a reader's browser
//! would, and reports what happened: the DOM after the page's scripts ran,
//! what the page wrote to the console, every request it tried to send
//! anywhere, and a screenshot.
//!
//! Chromium is told to use a proxy on 127.0.0.1 that records each request
//! and refuses it, so "loads nothing from outside" is checked, not assumed.
//! The browser's own traffic is switched off, so a recorded request is the
//! page's: background networking, updates and sync by their switches, the
//! network time query, the search preconnect and the AI-mode eligibility
//! check as features; the account check that every profile makes on start
//! (ListAccounts), which no switch turns off, and the component update
//! check (which Chromium 156 makes despite `--disable-component-update`)
//! are sent to a loopback port nobody listens on (loopback addresses
//! bypass the proxy).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::http::{unreachable_url, Reply, Server};

/// What rendering a page showed.
pub struct Rendered {
    /// The DOM, serialized after the page's scripts ran (`--dump-dom`).
    pub dom: String,
    /// Every console line of the page (errors, CSP violations, logs): a
    /// report writes none.
    pub console: Vec<String>,
    /// The request lines the proxy received (`GET http://host/x HTTP/1.1`,
    /// `CONNECT host:443 HTTP/1.1`).
    pub requests: Vec<String>,
    pub screenshot: PathBuf,
    /// Chromium's whole stderr, for failure messages.
    pub log: String,
}

/// A plot of a pipe-report page as the page's own script measured it
/// after layout (its `data-` attributes), and what it holds.
#[derive(Debug, Clone, PartialEq)]
pub struct Figure {
    /// The plot's file name in the Markdown with images.
    pub plot: String,
    pub width: u32,
    pub height: u32,
    /// Lines, areas and bars drawn.
    pub marks: u32,
    /// The smallest text of the plot as laid out, in CSS pixels.
    pub min_font: f64,
    /// The computed fill of its themed text (`rgb(34, 34, 34)`).
    pub ink: String,
    /// Its SVG as the browser serialized it.
    pub svg: String,
}

impl Figure {
    /// The contents of its `<text>` elements whose attributes contain
    /// `attribute` (`text-anchor="end"`: a line chart's y tick labels),
    /// trimmed, empty ones left out.
    pub fn texts_with(&self, attribute: &str) -> Vec<String> {
        self.svg
            .split("<text ")
            .skip(1)
            .filter_map(|rest| {
                let (tag, rest) = rest.split_once('>')?;
                let content = rest.split("</text>").next()?.trim();
                (tag.contains(attribute) && !content.is_empty()).then(|| content.to_string())
            })
            .collect()
    }

    /// The same with every text.
    pub fn texts(&self) -> Vec<String> {
        self.texts_with("")
    }
}

/// The brightness of a CSS colour (`rgb(30, 30, 30)`), 0 to 255: the mean
/// of its channels.
pub fn brightness(colour: &str) -> f64 {
    let channels: Vec<f64> = colour
        .trim_start_matches("rgba(")
        .trim_start_matches("rgb(")
        .trim_end_matches(')')
        .split(',')
        .take(3)
        .map(|channel| {
            channel
                .trim()
                .parse::<f64>()
                .unwrap_or_else(|e| panic!("`{colour}` is not rgb(r, g, b): {e}"))
        })
        .collect();
    assert_eq!(channels.len(), 3, "`{colour}` is not rgb(r, g, b)");
    channels.iter().sum::<f64>() / 3.0
}

impl Rendered {
    /// The page's plots, after checking what every page pipe writes must
    /// be: nothing loaded from outside, nothing on the console, and every
    /// plot laid out at a readable size with something drawn in it.
    pub fn checked_figures(&self) -> Vec<Figure> {
        assert_eq!(
            self.requests,
            Vec::<String>::new(),
            "the page loaded from outside"
        );
        assert_eq!(self.console, Vec::<String>::new(), "{}", self.log);
        let figures = self.figures();
        for figure in &figures {
            assert!(
                figure.width > 100 && figure.height > 100,
                "{} is {}x{}",
                figure.plot,
                figure.width,
                figure.height
            );
            assert!(figure.marks > 0, "{} drew nothing", figure.plot);
        }
        figures
    }

    /// The page's background as its script read it (`data-background`).
    pub fn background(&self) -> String {
        let start = self
            .dom
            .find("data-background=\"")
            .unwrap_or_else(|| panic!("no data-background on the page:\n{}", self.dom))
            + "data-background=\"".len();
        let end = start + self.dom[start..].find('"').expect("a closed value");
        self.dom[start..end].to_string()
    }

    /// Each table's box as the page's script measured it after layout:
    /// (the table's width, the width the box shows), in CSS pixels; a
    /// table wider than its box scrolls sideways.
    pub fn table_widths(&self) -> Vec<(u32, u32)> {
        self.dom
            .split("<div class=\"scroll\"")
            .skip(1)
            .map(|rest| {
                let tag = &rest[..rest.find('>').expect("a closed <div> tag")];
                let number = |name: &str| -> u32 {
                    let start = tag
                        .find(&format!("{name}=\""))
                        .unwrap_or_else(|| panic!("no {name} in <div class=\"scroll\"{tag}>"))
                        + name.len()
                        + 2;
                    tag[start..start + tag[start..].find('"').expect("a closed value")]
                        .parse()
                        .unwrap_or_else(|e| panic!("{name} of <div{tag}>: {e}"))
                };
                (number("data-scroll-width"), number("data-client-width"))
            })
            .collect()
    }

    /// Every plot of the page, in order.
    pub fn figures(&self) -> Vec<Figure> {
        self.dom
            .split("<figure ")
            .skip(1)
            .map(|rest| {
                let tag = &rest[..rest.find('>').expect("a closed <figure> tag")];
                let attribute = |name: &str| {
                    let start = tag
                        .find(&format!("{name}=\""))
                        .unwrap_or_else(|| panic!("no {name} in <figure {tag}>"))
                        + name.len()
                        + 2;
                    tag[start..start + tag[start..].find('"').expect("a closed value")].to_string()
                };
                let number = |name: &str| {
                    attribute(name)
                        .parse::<u32>()
                        .unwrap_or_else(|e| panic!("{name} of <figure {tag}>: {e}"))
                };
                let svg = rest
                    .find("<svg")
                    .and_then(|start| {
                        let end = start + rest[start..].find("</svg>")?;
                        Some(rest[start..end].to_string())
                    })
                    .unwrap_or_default();
                Figure {
                    plot: attribute("data-plot"),
                    width: number("data-width"),
                    height: number("data-height"),
                    marks: number("data-marks"),
                    min_font: attribute("data-min-font")
                        .parse()
                        .unwrap_or_else(|e| panic!("data-min-font of <figure {tag}>: {e}")),
                    ink: attribute("data-ink"),
                    svg,
                }
            })
            .collect()
    }
}

/// The Chromium binary on PATH; panics naming the install script when
/// there is none, so a missing browser fails the tests instead of
/// skipping them.
pub fn chromium() -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path) {
        for name in ["chromium", "chromium-browser"] {
            let candidate = dir.join(name);
            if candidate.is_file() {
                return candidate;
            }
        }
    }
    panic!(
        "chromium is not on PATH, and the HTML report tests render pages in it: run \
         scripts/install-chromium.sh (scripts/test.sh does) and test again"
    );
}

/// Where tests keep files for a person to look at afterwards:
/// `target/test-artefacts/` of the build running the tests.
pub fn artefact_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    // target/PROFILE/deps/TEST-BINARY
    let target = exe
        .ancestors()
        .nth(3)
        .expect("the test binary lies in target/PROFILE/deps/")
        .to_path_buf();
    let dir = target.join("test-artefacts");
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
    dir
}

/// Renders `page` in a window `width` x `height` pixels and saves a
/// screenshot of it at `screenshot`.
pub fn render(page: &Path, screenshot: &Path, size: (u32, u32)) -> Rendered {
    render_with(page, "", screenshot, size, &[])
}

/// [`render`] at `page#fragment`: a page whose script reads its view from
/// its address (the compare page's `#hide=2&filter=lr`) opens in that
/// view, which is how a test sees what a reader's clicks would do.
pub fn render_at(page: &Path, fragment: &str, screenshot: &Path, size: (u32, u32)) -> Rendered {
    render_with(page, &format!("#{fragment}"), screenshot, size, &[])
}

/// [`render`] of `page` with `script` run after the page's own scripts,
/// as a reader's clicks would be (`document.querySelector(..).click()`),
/// the DOM dumped after it: a copy of the page beside it with the script
/// added before `</body>` (its policy allows inline scripts, as its own
/// are), so the page itself is the binary's bytes. What the script finds
/// (heights laid out, say) it writes into the DOM as attributes.
pub fn render_with_script(
    page: &Path,
    script: &str,
    screenshot: &Path,
    size: (u32, u32),
) -> Rendered {
    let html =
        std::fs::read_to_string(page).unwrap_or_else(|e| panic!("read {}: {e}", page.display()));
    let end = html
        .rfind("</body>")
        .unwrap_or_else(|| panic!("{} has no </body>", page.display()));
    let scripted = page.with_extension("scripted.html");
    std::fs::write(
        &scripted,
        format!(
            "{}<script>{script}</script>\n{}",
            &html[..end],
            &html[end..]
        ),
    )
    .unwrap_or_else(|e| panic!("write {}: {e}", scripted.display()));
    render_with(&scripted, "", screenshot, size, &[])
}

/// [`render`] for a reader whose browser prefers a dark colour scheme
/// (`prefers-color-scheme: dark` matches).
pub fn render_dark(page: &Path, screenshot: &Path, size: (u32, u32)) -> Rendered {
    // Blink's preferredColorScheme: 0 is dark, 1 light.
    render_with(
        page,
        "",
        screenshot,
        size,
        &["--blink-settings=preferredColorScheme=0"],
    )
}

fn render_with(
    page: &Path,
    fragment: &str,
    screenshot: &Path,
    (width, height): (u32, u32),
    more_args: &[&str],
) -> Rendered {
    let browser = chromium();
    let proxy = Server::start(|_, _| Reply::status(502));
    let profile = tempfile::tempdir().expect("a temporary Chromium profile");
    if let Some(dir) = screenshot.parent() {
        std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
    }
    let _ = std::fs::remove_file(screenshot);
    let page = page
        .canonicalize()
        .unwrap_or_else(|e| panic!("{}: {e}", page.display()));
    let output = Command::new(&browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-default-apps",
            "--disable-extensions",
            "--enable-logging=stderr",
            "--v=0",
            "--run-all-compositor-stages-before-draw",
            "--virtual-time-budget=1000",
            "--hide-scrollbars",
            // Chromium's own services, not the page: the optimization
            // guide asked its server once in a quickstart test's render.
            "--disable-features=NetworkTimeServiceQuerying,PreconnectToSearch,AimEnabled,\
             AimServerEligibilityEnabled,OptimizationHints,OptimizationHintsFetching,\
             OptimizationGuideModelDownloading,OptimizationTargetPrediction",
        ])
        .arg(format!("--gaia-url={}", unreachable_url("")))
        // Chromium 156 asks its component update server at every start
        // despite --disable-component-update; pointed at loopback, the
        // question never reaches the recording proxy.
        .arg(format!(
            "--component-updater=url-source={}",
            unreachable_url("")
        ))
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(format!("--proxy-server=http://127.0.0.1:{}", proxy.port()))
        .args(more_args)
        .arg(format!("--window-size={width},{height}"))
        .arg(format!("--screenshot={}", screenshot.display()))
        .arg("--dump-dom")
        .arg(format!("file://{}{fragment}", page.display()))
        .output()
        .unwrap_or_else(|e| panic!("run {}: {e}", browser.display()));
    let log = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(
        output.status.success(),
        "{} failed ({}):\n{log}",
        browser.display(),
        output.status
    );
    assert!(
        screenshot.is_file(),
        "Chromium wrote no screenshot at {}:\n{log}",
        screenshot.display()
    );
    let console = log
        .lines()
        .filter(|line| line.contains(":CONSOLE") || line.contains("Uncaught"))
        .map(String::from)
        .collect();
    let requests = proxy
        .requests()
        .iter()
        .map(|request| format!("{} {}", request.method, request.path))
        .collect();
    Rendered {
        dom: String::from_utf8_lossy(&output.stdout).into_owned(),
        console,
        requests,
        screenshot: screenshot.to_path_buf(),
        log,
    }
}
