//! A [`Table`] of a [`crate::Document`]: its cells, and how it is written
//! as HTML and as Markdown.

use std::fmt::Write;

use crate::text::{escape_html, escape_markdown, format_number};

/// What a missing value shows as.
pub(crate) const MISSING: &str = "–";

/// One table cell: its text, and the number it shows when it shows one
/// (right-aligned, and sorted by value rather than by text).
#[derive(Debug, Clone, PartialEq)]
pub struct Cell {
    pub text: String,
    pub number: Option<f64>,
    /// Shown after the text, smaller: how the value changed against a
    /// baseline (`▲ +0.1 (+17%) ✓`), coloured by its [`Tone`].
    pub change: Option<Change>,
    /// The best value of its column (by the column's [`Better`]): marked,
    /// so that the winner reads at a glance.
    pub best: bool,
}

/// A cell's change against a baseline.
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    pub text: String,
    /// Better or worse by the column's direction; none when unknown.
    pub tone: Option<Tone>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tone {
    Better,
    Worse,
}

/// Which way a column's numbers are better.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Better {
    Higher,
    Lower,
}

impl Cell {
    pub fn text(text: impl Into<String>) -> Cell {
        Cell {
            text: text.into(),
            number: None,
            change: None,
            best: false,
        }
    }

    /// A number with four significant digits.
    pub fn number(value: f64) -> Cell {
        Cell::number_as(value, format_number(value))
    }

    /// A number shown as `text` (`12.3 s`, `2.1x`), sorted by `value`.
    pub fn number_as(value: f64, text: impl Into<String>) -> Cell {
        Cell {
            number: Some(value),
            ..Cell::text(text)
        }
    }

    pub fn missing() -> Cell {
        Cell::text(MISSING)
    }

    /// The cell with `change` shown after its value.
    pub fn with_change(mut self, text: impl Into<String>, tone: Option<Tone>) -> Cell {
        self.change = Some(Change {
            text: text.into(),
            tone,
        });
        self
    }

    /// The cell marked as the best of its column.
    pub fn as_best(mut self) -> Cell {
        self.best = true;
        self
    }

    /// Its text and change, as plain text (Markdown).
    fn plain_text(&self) -> String {
        match &self.change {
            Some(change) => format!("{} {}", self.text, change.text),
            None => self.text.clone(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Table {
    pub columns: Vec<String>,
    pub rows: Vec<Vec<Cell>>,
    /// Controls for a reader to explore it on the page (the HTML only).
    pub explore: Option<Explore>,
}

/// What a reader can change in a table on the page (the compare page's):
/// which columns show (a tick box each), which rows (a text filter), and
/// which rows' lines the charts draw (a tick box per row, and its legend
/// entries). The page's script builds the controls, so that a page read
/// without scripts shows every column and no control that does nothing.
/// Such a table reads at a glance: no cell wraps (its box scrolls
/// sideways when it does not fit), long names are headed short.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Explore {
    /// Per row, the key of its lines in the charts ([`crate::Series::key`]).
    pub row_keys: Vec<String>,
    /// Per column, whether it shows at first.
    pub shown: Vec<bool>,
    /// Per column, a header shorter than its name (`val_acc` for
    /// `train.val_acc`), the name its tooltip; the name still names the
    /// column in the controls and in the page's address.
    pub short_names: Vec<Option<String>>,
    /// Per column, which way its numbers are better: the first click on
    /// its header puts the best first.
    pub better: Vec<Option<Better>>,
}

impl Table {
    pub fn new(columns: Vec<String>) -> Table {
        Table {
            columns,
            rows: Vec::new(),
            explore: None,
        }
    }

    /// A column is numeric when every cell in it that is not missing is a
    /// number, and at least one is.
    fn numeric(&self, column: usize) -> bool {
        let cells = self.rows.iter().filter_map(|row| row.get(column));
        let mut any = false;
        for cell in cells {
            match cell.number {
                Some(_) => any = true,
                None if cell.text == MISSING => {}
                None => return false,
            }
        }
        any
    }
}

/// A data table's cells of at most this many characters stay on one line
/// (`bf16-mixed`, `1 h 20 min`), longer ones wrap: a table too wide for
/// the page narrows by wrapping its headers and long texts, never a value
/// at its hyphen. (An explored table wraps nothing, and scrolls.)
const SHORT_CELL: usize = 24;

pub(crate) fn table_html(html: &mut String, table: &Table) {
    let numeric: Vec<bool> = (0..table.columns.len()).map(|c| table.numeric(c)).collect();
    let explore = table.explore.as_ref();
    let _ = write!(
        html,
        "<div class=\"scroll\"><table class=\"data sortable\"{}>\n<thead><tr>",
        if explore.is_some() {
            " data-explore"
        } else {
            ""
        }
    );
    for (column, name) in table.columns.iter().enumerate() {
        header_html(html, name, numeric[column], explore, column);
    }
    html.push_str("</tr></thead>\n<tbody>\n");
    for (index, row) in table.rows.iter().enumerate() {
        match explore.and_then(|explore| explore.row_keys.get(index)) {
            Some(key) => {
                let _ = write!(html, "<tr data-key=\"{}\">", escape_html(key));
            }
            None => html.push_str("<tr>"),
        }
        for (column, cell) in row.iter().enumerate() {
            let long = explore.is_none()
                && (cell.text.chars().count() > SHORT_CELL || cell.text.contains('\n'));
            let classes: Vec<&str> = [
                (numeric.get(column) == Some(&true), "num"),
                (long, "long"),
                (cell.best, "best"),
            ]
            .iter()
            .filter_map(|&(on, class)| on.then_some(class))
            .collect();
            html.push_str("<td");
            if !classes.is_empty() {
                let _ = write!(html, " class=\"{}\"", classes.join(" "));
            }
            if cell.best {
                html.push_str(" title=\"the best of this column\"");
            }
            if let Some(value) = cell.number.filter(|value| value.is_finite()) {
                let _ = write!(html, " data-sort=\"{value:e}\"");
            }
            html.push('>');
            cell_html(html, cell);
            html.push_str("</td>");
        }
        html.push_str("</tr>\n");
    }
    html.push_str("</tbody>\n</table></div>\n");
}

/// A header cell: its name, which may wrap after `.` and `_`; in an
/// explored table its short name whole, the full name its tooltip and its
/// `data-name`, with the way its numbers are better (`data-better`).
fn header_html(
    html: &mut String,
    name: &str,
    numeric: bool,
    explore: Option<&Explore>,
    column: usize,
) {
    let class = if numeric { " class=\"num\"" } else { "" };
    let Some(explore) = explore else {
        let _ = write!(
            html,
            "<th{class} title=\"sort by this column\">{}</th>",
            breakable(name)
        );
        return;
    };
    let off = explore.shown.get(column) == Some(&false);
    let short = explore.short_names.get(column).cloned().flatten();
    let better = explore.better.get(column).copied().flatten();
    let (better_attribute, how) = match better {
        Some(Better::Higher) => (" data-better=\"higher\"", "best (highest) first"),
        Some(Better::Lower) => (" data-better=\"lower\"", "best (lowest) first"),
        None => ("", "sort by this column"),
    };
    let _ = write!(
        html,
        "<th{class}{} data-name=\"{}\"{better_attribute} title=\"{}: {how}\">{}</th>",
        if off { " data-off" } else { "" },
        escape_html(name),
        escape_html(name),
        escape_html(short.as_deref().unwrap_or(name))
    );
}

/// A cell's content: its text, and its change after it in a span of its
/// own, coloured by its tone (`change better`).
fn cell_html(html: &mut String, cell: &Cell) {
    let Some(change) = &cell.change else {
        html.push_str(&escape_html(&cell.text));
        return;
    };
    let tone = match change.tone {
        Some(Tone::Better) => " better",
        Some(Tone::Worse) => " worse",
        None => "",
    };
    let _ = write!(
        html,
        "<span class=\"value\">{}</span> <span class=\"change{tone}\">{}</span>",
        escape_html(&cell.text),
        escape_html(&change.text)
    );
}

/// A column name as header text that may wrap after each `.` and `_`
/// (`train.<wbr>memory.<wbr>optimizer_<wbr>bytes`): a results table's
/// names are long and have no spaces, and unbroken they set the table's
/// width, which then scrolls sideways on a laptop's screen.
fn breakable(name: &str) -> String {
    let mut html = String::new();
    for ch in name.chars() {
        html.push_str(&escape_html(ch.encode_utf8(&mut [0; 4])));
        if ch == '.' || ch == '_' {
            html.push_str("<wbr>");
        }
    }
    html
}

pub(crate) fn table_markdown(markdown: &mut String, table: &Table) {
    let cell = |text: &str| {
        let escaped = escape_markdown(text);
        if escaped.is_empty() {
            " ".to_string()
        } else {
            escaped
        }
    };
    markdown.push('|');
    for name in &table.columns {
        let _ = write!(markdown, " {} |", cell(name));
    }
    markdown.push_str("\n|");
    for column in 0..table.columns.len() {
        markdown.push_str(if table.numeric(column) {
            " ---: |"
        } else {
            " --- |"
        });
    }
    markdown.push('\n');
    for row in &table.rows {
        markdown.push('|');
        for column in 0..table.columns.len() {
            let text = row
                .get(column)
                .map_or(MISSING.to_string(), Cell::plain_text);
            let _ = write!(markdown, " {} |", cell(&text));
        }
        markdown.push('\n');
    }
}
