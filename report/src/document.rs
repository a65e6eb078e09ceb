//! A report as a list of blocks, rendered three ways: one self-contained
//! HTML page (styles, plots and its small script inline; a Content
//! Security Policy that forbids loading anything); Markdown that survives
//! being pasted into a GitHub or GitLab comment (text and tables only: a
//! plot shows as its table when it has one, else it is left out); and
//! Markdown with images, for a directory that is published with the plots'
//! SVG files beside it.

use std::fmt::Write;

use crate::text::{escape_html, escape_markdown};

mod table;

use table::{table_html, table_markdown};
pub use table::{Better, Cell, Change, Explore, Table, Tone};

/// An SVG plot: inline in the HTML, a file beside the Markdown with
/// images.
#[derive(Debug, Clone, PartialEq)]
pub struct Plot {
    /// `03-train-loss.svg`: numbered in document order, letters, digits,
    /// `-` and `.` only, so it is safe as a file name and a relative link.
    pub file_name: String,
    pub title: String,
    pub svg: String,
    /// The same data as a table, shown in its place where images cannot
    /// go (the pasteable Markdown): a confusion matrix's counts.
    pub table: Option<Table>,
    /// One of a set of small charts, laid out side by side as many as the
    /// page's width holds (a sweep's param against a metric, per param).
    pub small: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Block {
    /// A section heading, level 2 or 3.
    Heading {
        level: u8,
        text: String,
    },
    Paragraph(String),
    /// Name/value pairs (the run's facts, a stage's hardware).
    Facts(Vec<(String, String)>),
    Table(Table),
    Plot(Plot),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Document {
    pub title: String,
    pub blocks: Vec<Block>,
}

impl Document {
    pub fn new(title: impl Into<String>) -> Document {
        Document {
            title: title.into(),
            blocks: Vec::new(),
        }
    }

    pub fn heading(&mut self, level: u8, text: impl Into<String>) {
        self.blocks.push(Block::Heading {
            level: level.clamp(2, 3),
            text: text.into(),
        });
    }

    pub fn paragraph(&mut self, text: impl Into<String>) {
        self.blocks.push(Block::Paragraph(text.into()));
    }

    pub fn facts(&mut self, facts: Vec<(String, String)>) {
        if !facts.is_empty() {
            self.blocks.push(Block::Facts(facts));
        }
    }

    pub fn table(&mut self, table: Table) {
        self.blocks.push(Block::Table(table));
    }

    /// Adds a plot; its file name is its place among the document's plots
    /// and `name` reduced to safe characters (`train@lr=0.1` ->
    /// `02-train-lr-0.1.svg`).
    pub fn plot(&mut self, name: &str, title: impl Into<String>, svg: String) {
        self.plot_with_table(name, title, svg, None);
    }

    /// [`Document::plot`], with `table` to show instead where images
    /// cannot go.
    pub fn plot_with_table(
        &mut self,
        name: &str,
        title: impl Into<String>,
        svg: String,
        table: Option<Table>,
    ) {
        let number = self.plots().count() + 1;
        let mut slug = String::new();
        for ch in name.chars() {
            if ch.is_ascii_alphanumeric() || ch == '.' {
                slug.push(ch.to_ascii_lowercase());
            } else if !slug.ends_with('-') {
                slug.push('-');
            }
        }
        let slug: String = slug.trim_matches(['-', '.']).chars().take(60).collect();
        let file_name = if slug.is_empty() {
            format!("{number:02}.svg")
        } else {
            format!("{number:02}-{slug}.svg")
        };
        self.blocks.push(Block::Plot(Plot {
            file_name,
            title: title.into(),
            svg,
            table,
            small: false,
        }));
    }

    /// [`Document::plot`] drawn small, beside the small plots next to it.
    pub fn small_plot(&mut self, name: &str, title: impl Into<String>, svg: String) {
        self.plot(name, title, svg);
        if let Some(Block::Plot(plot)) = self.blocks.last_mut() {
            plot.small = true;
        }
    }

    pub fn plots(&self) -> impl Iterator<Item = &Plot> {
        self.blocks.iter().filter_map(|block| match block {
            Block::Plot(plot) => Some(plot),
            _ => None,
        })
    }

    /// The page: one file, nothing loaded from anywhere.
    pub fn to_html(&self) -> String {
        let mut html = String::new();
        let title = escape_html(&self.title);
        // A table to explore (the compare page's) takes the window's
        // width, so that its columns show side by side; text and charts
        // keep the width they read best at.
        let explore = self
            .blocks
            .iter()
            .any(|block| matches!(block, Block::Table(table) if table.explore.is_some()));
        let main = if explore {
            "<main class=\"wide\">"
        } else {
            "<main>"
        };
        let _ = write!(
            html,
            "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
             <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; \
             style-src 'unsafe-inline'; script-src 'unsafe-inline'\">\n\
             <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
             <title>{title}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n{main}\n<h1>{title}</h1>\n"
        );
        let mut in_small = false;
        for block in &self.blocks {
            // Small plots side by side: one box around each run of them.
            let small = matches!(block, Block::Plot(plot) if plot.small);
            if small != in_small {
                html.push_str(if small {
                    "<div class=\"small-plots\">\n"
                } else {
                    "</div>\n"
                });
                in_small = small;
            }
            block_html(&mut html, block);
        }
        if in_small {
            html.push_str("</div>\n");
        }
        // A table's controls come first, so that the sorting set up after
        // them counts the column of row switches they add.
        let _ = write!(
            html,
            "</main>\n<script>{}{SCRIPT}</script>\n</body>\n</html>\n",
            if explore { EXPLORE_SCRIPT } else { "" }
        );
        html
    }

    /// Markdown for a directory published with the plots' files beside
    /// it: the same blocks, plots as images linking those files.
    pub fn to_markdown_with_images(&self) -> String {
        self.markdown(|markdown, plot| {
            let _ = writeln!(
                markdown,
                "![{}]({})",
                escape_markdown(&plot.title),
                plot.file_name
            );
        })
    }

    /// Markdown that reads the same pasted anywhere (a pull-request
    /// comment): text and tables only, no image and no link. A plot with a
    /// table shows as its title and that table; the others are left out,
    /// and a closing line says so, with `where_plots_are` (the files that
    /// have them, named as text).
    pub fn to_pasteable_markdown(&self, where_plots_are: &str) -> String {
        let mut left_out = 0;
        let mut markdown = self.markdown(|markdown, plot| match &plot.table {
            Some(table) => {
                let _ = writeln!(markdown, "**{}**\n", escape_markdown(&plot.title));
                table_markdown(markdown, table);
            }
            None => left_out += 1,
        });
        // A left-out plot's block wrote nothing: no doubled blank lines.
        while markdown.contains("\n\n\n") {
            markdown = markdown.replace("\n\n\n", "\n\n");
        }
        if left_out > 0 {
            let _ = writeln!(
                markdown,
                "\n{left_out} plot{} not shown here: {}",
                if left_out == 1 { " is" } else { "s are" },
                escape_markdown(where_plots_are)
            );
        }
        markdown
    }

    fn markdown(&self, mut plot_markdown: impl FnMut(&mut String, &Plot)) -> String {
        let mut markdown = format!("# {}\n", escape_markdown(&self.title));
        for block in &self.blocks {
            markdown.push('\n');
            match block {
                Block::Heading { level, text } => {
                    let _ = writeln!(
                        markdown,
                        "{} {}",
                        "#".repeat(usize::from(*level)),
                        escape_markdown(text)
                    );
                }
                Block::Paragraph(text) => {
                    let _ = writeln!(markdown, "{}", escape_markdown(text));
                }
                Block::Facts(facts) => {
                    for (name, value) in facts {
                        let _ = writeln!(
                            markdown,
                            "- {}: {}",
                            escape_markdown(name),
                            escape_markdown(value)
                        );
                    }
                }
                Block::Table(table) => table_markdown(&mut markdown, table),
                Block::Plot(plot) => plot_markdown(&mut markdown, plot),
            }
        }
        markdown
    }
}

/// One block of the page.
fn block_html(html: &mut String, block: &Block) {
    match block {
        Block::Heading { level, text } => {
            let _ = writeln!(html, "<h{level}>{}</h{level}>", escape_html(text));
        }
        Block::Paragraph(text) => {
            let _ = writeln!(html, "<p>{}</p>", escape_html(text));
        }
        Block::Facts(facts) => {
            html.push_str("<table class=\"facts\">\n");
            for (name, value) in facts {
                let _ = writeln!(
                    html,
                    "<tr><th scope=\"row\">{}</th><td>{}</td></tr>",
                    escape_html(name),
                    escape_html(value)
                );
            }
            html.push_str("</table>\n");
        }
        Block::Table(table) => table_html(html, table),
        Block::Plot(plot) => {
            let _ = writeln!(
                html,
                "<figure class=\"plot{}\" data-plot=\"{}\">\n{}\n<figcaption>{}</figcaption>\n</figure>",
                if plot.small { " small" } else { "" },
                escape_html(&plot.file_name),
                plot.svg.trim(),
                escape_html(&plot.title)
            );
        }
    }
}

/// The page's whole style: system fonts only, nothing fetched. Colours
/// are variables with a dark set under `prefers-color-scheme: dark`; the
/// plots carry their own light and dark ink (`pipe_report::chart`). Plots
/// take the content's width, so their text is drawn at least at the size
/// the chart gives it; a confusion matrix, being square, less. On a narrow
/// screen a plot keeps a width at which its text stays about 12 px and
/// scrolls sideways instead.
const STYLE: &str = "
:root{color-scheme:light dark;--bg:#fafafa;--fg:#222;--muted:#666;--rule:#ddd;--line:#e4e4e4;--head:#f0f0f0;--panel:#fff;--better:#1a7f37;--worse:#cf222e;--best:#dafbe1}
@media (prefers-color-scheme: dark){:root{--bg:#121212;--fg:#ddd;--muted:#aaa;--rule:#444;--line:#333;--head:#242424;--panel:#1e1e1e;--better:#3fb950;--worse:#f85149;--best:#12361f}}
body{margin:0;background:var(--bg);color:var(--fg);font:15px/1.45 system-ui,-apple-system,'Segoe UI',sans-serif}
main{max-width:1000px;margin:0 auto;padding:16px 24px 48px}
main.wide{max-width:1440px}
main.wide>p,main.wide>figure.plot{max-width:1000px}
h1{font-size:26px;margin:8px 0 16px}
h2{font-size:20px;margin:32px 0 8px;border-bottom:1px solid var(--rule);padding-bottom:4px}
h3{font-size:17px;margin:20px 0 8px}
table{border-collapse:collapse;margin:8px 0}
th,td{padding:4px 10px;border-bottom:1px solid var(--line);text-align:left;vertical-align:top;white-space:pre-wrap}
table.data th{background:var(--head);cursor:pointer;user-select:none}
table.data td{white-space:nowrap}
table.data td.long{white-space:pre-wrap}
table.data th[aria-sort=ascending]::after{content:' \\25B2'}
table.data th[aria-sort=descending]::after{content:' \\25BC'}
.num{text-align:right;font-variant-numeric:tabular-nums}
table.facts th{font-weight:600;padding-left:0}
.scroll{overflow-x:auto}
table[data-explore] th,table[data-explore] td,table[data-explore] td.long{white-space:nowrap}
.change{font-size:13px;color:var(--muted)}
.change.better{color:var(--better)}
.change.worse{color:var(--worse)}
td.best{background:var(--best);font-weight:700}
td.best::before{content:'\\2605  ';color:var(--better)}
td.best .change{font-weight:400}
.small-plots{display:grid;grid-template-columns:repeat(auto-fill,minmax(340px,1fr));gap:12px;margin:12px 0}
.small-plots figure.plot{margin:0}
figure.plot.small svg{min-width:0}
figure.plot{margin:12px 0;background:var(--panel);border:1px solid var(--line);padding:8px;display:block;overflow-x:auto}
figure.plot svg{display:block;width:100%;min-width:680px;height:auto}
figure.plot svg.heat-map{max-width:600px;min-width:480px}
figcaption{color:var(--muted);font-size:13px;margin-top:4px}
.explore{display:flex;flex-wrap:wrap;gap:8px 24px;align-items:flex-start;margin:8px 0}
.explore fieldset{border:1px solid var(--line);margin:0;padding:4px 10px}
.explore fieldset label{display:inline-block;margin-right:14px;white-space:nowrap}
.explore details.more-columns summary{cursor:pointer;color:var(--muted);margin-top:2px}
.explore input[type=search]{font:inherit;padding:2px 6px}
tr.off>td:not(.toggle){opacity:.45}
g.legend-entry[data-key]{cursor:pointer}
g.legend-entry.off{opacity:.35}
";

/// The script of a table's [`Explore`] controls.
const EXPLORE_SCRIPT: &str = include_str!("document/explore.js");

/// Sorts a table by the clicked column (numbers by value), and records on
/// each plot the size it was laid out at, how many shapes it drew, the
/// smallest text it shows in CSS pixels and the colour of its ink
/// (`data-width`, `data-height`, `data-marks`, `data-min-font`,
/// `data-ink`), on each table's box how wide the table is and how wide
/// the box shows it (`data-scroll-width`, `data-client-width`: more is
/// scrolled sideways), and on the page its background (`data-background`),
/// so that a headless browser's DOM dump shows what a reader sees.
const SCRIPT: &str = r#"
document.querySelectorAll('table.sortable').forEach(function (table) {
  table.querySelectorAll('th').forEach(function (th, column) {
    if (th.hasAttribute('data-nosort')) { return; }
    th.addEventListener('click', function () {
      // The first click on a column whose numbers are better one way
      // (data-better) puts the best first; every click after turns it.
      var sorted = th.getAttribute('aria-sort');
      var ascending = sorted ? sorted !== 'ascending' : th.getAttribute('data-better') !== 'higher';
      table.querySelectorAll('th').forEach(function (other) { other.removeAttribute('aria-sort'); });
      th.setAttribute('aria-sort', ascending ? 'ascending' : 'descending');
      var body = table.tBodies[0];
      var rows = Array.prototype.slice.call(body.rows);
      var key = function (row) {
        var cell = row.cells[column];
        if (!cell) { return ''; }
        var sort = cell.getAttribute('data-sort');
        return sort === null ? cell.textContent : parseFloat(sort);
      };
      rows.sort(function (a, b) {
        var x = key(a), y = key(b);
        var numbers = typeof x === 'number', other = typeof y === 'number';
        // A missing value (no number in a column of numbers) goes last
        // either way.
        if (numbers !== other) { return numbers ? -1 : 1; }
        var order = numbers ? x - y : String(x).localeCompare(String(y));
        return ascending ? order : -order;
      });
      rows.forEach(function (row) { body.appendChild(row); });
    });
  });
});
document.querySelectorAll('figure.plot').forEach(function (figure) {
  var svg = figure.querySelector('svg');
  if (!svg) { return; }
  var box = svg.getBoundingClientRect();
  var marks = 0;
  svg.querySelectorAll('path, polyline, polygon, rect, circle, line').forEach(function (shape) {
    var shapeBox = shape.getBoundingClientRect();
    if (shapeBox.width > 0 || shapeBox.height > 0) { marks += 1; }
  });
  var scale = svg.viewBox.baseVal && svg.viewBox.baseVal.width ? box.width / svg.viewBox.baseVal.width : 1;
  var smallest = 0;
  var ink = '';
  svg.querySelectorAll('text').forEach(function (text) {
    if (!text.textContent.trim()) { return; }
    var size = parseFloat(getComputedStyle(text).fontSize) * scale;
    if (!smallest || size < smallest) { smallest = size; }
    if (!ink && text.getAttribute('fill') === 'currentColor') { ink = getComputedStyle(text).fill; }
  });
  figure.setAttribute('data-width', String(Math.round(box.width)));
  figure.setAttribute('data-height', String(Math.round(box.height)));
  figure.setAttribute('data-marks', String(marks));
  figure.setAttribute('data-min-font', smallest.toFixed(1));
  figure.setAttribute('data-ink', ink);
});
document.querySelectorAll('div.scroll').forEach(function (box) {
  box.setAttribute('data-scroll-width', String(box.scrollWidth));
  box.setAttribute('data-client-width', String(box.clientWidth));
});
document.documentElement.setAttribute('data-background', getComputedStyle(document.body).backgroundColor);
"#;

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Document {
        let mut document = Document::new("run <1>");
        document.heading(2, "Results | all");
        document.facts(vec![("git".into(), "abc\ndirty".into())]);
        let mut table = Table::new(vec!["stage".into(), "seconds".into()]);
        table
            .rows
            .push(vec![Cell::text("a|b"), Cell::number(1.23456)]);
        table.rows.push(vec![Cell::text("c"), Cell::missing()]);
        document.table(table);
        document.plot("train@lr=0.1 <x>", "Loss", "<svg></svg>".into());
        document.plot("", "Empty", "<svg></svg>".into());
        document
    }

    #[test]
    fn plots_get_numbered_safe_file_names() {
        let names: Vec<_> = sample().plots().map(|p| p.file_name.clone()).collect();
        assert_eq!(names, ["01-train-lr-0.1-x.svg", "02.svg"]);
    }

    #[test]
    fn markdown_tables_keep_their_shape_and_align_numbers() {
        let markdown = sample().to_pasteable_markdown("in index.html");
        assert!(
            markdown
                .contains("| stage | seconds |\n| --- | ---: |\n| a\\|b | 1.235 |\n| c | – |\n"),
            "{markdown}"
        );
        assert!(markdown.contains("- git: abc<br>dirty"), "{markdown}");
        assert!(markdown.starts_with("# run &lt;1&gt;\n"), "{markdown}");
        assert!(!markdown.contains("!["), "{markdown}");
        assert!(
            markdown.ends_with("\n2 plots are not shown here: in index.html\n"),
            "{markdown}"
        );
        let with_images = sample().to_markdown_with_images();
        assert!(
            with_images.contains("![Loss](01-train-lr-0.1-x.svg)"),
            "{with_images}"
        );
    }

    #[test]
    fn a_plot_with_a_table_shows_as_that_table_where_images_cannot_go() {
        let mut document = Document::new("t");
        let mut counts = Table::new(vec!["true \\ predicted".into(), "neg".into()]);
        counts.rows.push(vec![Cell::text("neg"), Cell::number(3.0)]);
        document.plot_with_table("m", "Confusion", "<svg></svg>".into(), Some(counts));
        let markdown = document.to_pasteable_markdown("in index.html");
        assert!(
            markdown.contains("**Confusion**\n\n| true \\\\ predicted | neg |"),
            "{markdown}"
        );
        assert!(!markdown.contains("not shown"), "{markdown}");
    }

    #[test]
    fn the_page_inlines_plots_and_forbids_loading_anything() {
        let html = sample().to_html();
        assert!(html.contains("default-src 'none'"));
        assert!(html
            .contains("<figure class=\"plot\" data-plot=\"01-train-lr-0.1-x.svg\">\n<svg></svg>"));
        assert!(html.contains("<title>run &lt;1&gt;</title>"));
        assert!(
            html.contains("<td class=\"num\" data-sort=\"1.23456e0\">1.235</td>"),
            "{html}"
        );
        assert!(!html.contains("src=") && !html.contains("href="));
    }
}
