//! A plot's data file read as named columns: CSV, TSV, a JSON list of
//! records, a JSON object whose one key holds such a list (DVC's shape),
//! or JSON lines. The file is a stage's output, so untrusted: it is
//! bounded in bytes and rows before it is read, and every problem is an
//! error naming the file and, where there is one, the row and column.

use serde_json::Value;

use crate::{ReportError, Result};

/// A plot file larger than this is refused, not read.
pub const MAX_PLOT_BYTES: u64 = 64 << 20;
/// A plot file of more rows than this is refused.
pub const MAX_PLOT_ROWS: usize = 1_000_000;
/// A plot file of more columns than this is refused.
pub const MAX_PLOT_COLUMNS: usize = 1_000;
/// A plot file of more cells than this is refused: within the bytes
/// allowed, a file of one-digit fields would be 32 million cells (a cell
/// is 24 bytes held).
pub const MAX_PLOT_CELLS: usize = 8_000_000;

/// Whether `rows` rows of `columns` columns are past a limit: the limit's
/// message.
fn too_large(rows: usize, columns: usize) -> Option<String> {
    if columns > MAX_PLOT_COLUMNS {
        Some(format!(
            "more than {MAX_PLOT_COLUMNS} columns, the most a plot file may have"
        ))
    } else if rows > MAX_PLOT_ROWS {
        Some(format!(
            "more than {MAX_PLOT_ROWS} rows, the most a plot file may have"
        ))
    } else if rows.saturating_mul(columns) > MAX_PLOT_CELLS {
        Some(format!(
            "more than {MAX_PLOT_CELLS} cells, the most a plot file may have"
        ))
    } else {
        None
    }
}

/// One cell.
#[derive(Debug, Clone, PartialEq)]
pub enum Datum {
    Empty,
    Number(f64),
    Text(Box<str>),
}

impl Datum {
    /// A field of a text file: a number when it reads as one.
    fn of_text(field: &str) -> Datum {
        let field = field.trim();
        if field.is_empty() {
            return Datum::Empty;
        }
        match field.parse::<f64>() {
            Ok(number) => Datum::Number(number),
            Err(_) => Datum::Text(field.into()),
        }
    }

    fn of_json(value: &Value) -> Datum {
        match value {
            Value::Null => Datum::Empty,
            Value::Number(number) => number.as_f64().map_or(Datum::Empty, Datum::Number),
            Value::String(text) => Datum::of_text(text),
            other => Datum::Text(other.to_string().into()),
        }
    }

    /// The cell as a label: a number as Rust prints it (`1`, `0.5`).
    pub fn label(&self) -> String {
        match self {
            Datum::Empty => String::new(),
            Datum::Number(number) => number.to_string(),
            Datum::Text(text) => text.to_string(),
        }
    }
}

/// The file's columns, in the file's order, each as long as the rows.
#[derive(Debug, Clone, PartialEq)]
pub struct DataTable {
    /// What messages call the file (its project path).
    pub file: String,
    pub names: Vec<String>,
    pub columns: Vec<Vec<Datum>>,
}

/// How a plot file is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Delimited(u8),
    Json,
    JsonLines,
}

impl DataTable {
    /// Reads `bytes` of the file called `file`, its format told by its
    /// extension (`.csv`, `.tsv`, `.json`, `.jsonl`, `.ndjson`), else by
    /// its first characters.
    pub fn read(file: &str, bytes: &[u8]) -> Result<DataTable> {
        let bad = |message: String| ReportError::PlotData {
            file: file.to_string(),
            message,
        };
        if bytes.len() as u64 > MAX_PLOT_BYTES {
            return Err(bad(format!(
                "{} bytes, more than the {MAX_PLOT_BYTES} a plot file may have",
                bytes.len()
            )));
        }
        let text = std::str::from_utf8(bytes)
            .map_err(|error| bad(format!("not UTF-8 text (byte {})", error.valid_up_to() + 1)))?;
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        let rows = match format_of(file, text) {
            Format::Delimited(delimiter) => delimited(text, delimiter),
            Format::Json => json_records(text),
            Format::JsonLines => json_lines(text),
        }
        .map_err(bad)?;
        let (names, rows) = rows;
        let mut table = DataTable {
            file: file.to_string(),
            columns: names
                .iter()
                .map(|_| Vec::with_capacity(rows.len()))
                .collect(),
            names,
        };
        for row in rows {
            for (column, datum) in table.columns.iter_mut().zip(row) {
                column.push(datum);
            }
        }
        Ok(table)
    }

    pub fn rows(&self) -> usize {
        self.columns.first().map_or(0, Vec::len)
    }

    pub fn has(&self, name: &str) -> bool {
        self.names.iter().any(|each| each == name)
    }

    /// The cells of column `name`, or an error naming the columns there are.
    pub fn column(&self, name: &str) -> Result<&[Datum]> {
        match self.names.iter().position(|each| each == name) {
            Some(index) => Ok(&self.columns[index]),
            None => Err(ReportError::PlotData {
                file: self.file.clone(),
                message: format!(
                    "no column `{name}`; its columns: {}",
                    if self.names.is_empty() {
                        "none".to_string()
                    } else {
                        self.names.join(", ")
                    }
                ),
            }),
        }
    }

    /// Column `name` as numbers, an empty cell NaN (a gap); a cell that is
    /// text is an error naming its row.
    pub fn numbers(&self, name: &str) -> Result<Vec<f64>> {
        self.column(name)?
            .iter()
            .enumerate()
            .map(|(row, datum)| match datum {
                Datum::Empty => Ok(f64::NAN),
                Datum::Number(number) => Ok(*number),
                Datum::Text(text) => Err(ReportError::PlotData {
                    file: self.file.clone(),
                    message: format!(
                        "column `{name}`, row {}: `{}` is not a number",
                        row + 1,
                        pipe_protocol::excerpt(text)
                    ),
                }),
            })
            .collect()
    }

    /// Whether every cell of column `index` is a number or empty, and one
    /// is a number: a column drawn by default.
    pub fn is_numeric(&self, index: usize) -> bool {
        let cells = &self.columns[index];
        cells.iter().any(|datum| matches!(datum, Datum::Number(_)))
            && cells
                .iter()
                .all(|datum| matches!(datum, Datum::Number(_) | Datum::Empty))
    }
}

fn format_of(file: &str, text: &str) -> Format {
    let extension = file
        .rsplit('/')
        .next()
        .and_then(|name| name.rsplit_once('.'))
        .map(|(_, extension)| extension.to_ascii_lowercase());
    match extension.as_deref() {
        Some("csv") => return Format::Delimited(b','),
        Some("tsv") => return Format::Delimited(b'\t'),
        Some("jsonl" | "ndjson") => return Format::JsonLines,
        Some("json") => return Format::Json,
        _ => {}
    }
    let start = text.trim_start();
    if start.starts_with('[') {
        return Format::Json;
    }
    if start.starts_with('{') {
        // One object over several lines, or one per line.
        let first_line = start.lines().next().unwrap_or("");
        return match serde_json::from_str::<Value>(first_line) {
            Ok(_) if start.lines().nth(1).is_some() => Format::JsonLines,
            _ => Format::Json,
        };
    }
    let header = start.lines().next().unwrap_or("");
    if header.contains('\t') && !header.contains(',') {
        Format::Delimited(b'\t')
    } else {
        Format::Delimited(b',')
    }
}

type Rows = (Vec<String>, Vec<Vec<Datum>>);

/// CSV (RFC 4180: quoted fields may hold the delimiter, quotes doubled and
/// line breaks) or TSV; the first record names the columns.
fn delimited(text: &str, delimiter: u8) -> Result<Rows, String> {
    let mut records = Records {
        bytes: text.as_bytes(),
        at: 0,
        line: 1,
        delimiter,
    };
    let Some((_, header)) = records.next_record()? else {
        return Err("empty: no header line".to_string());
    };
    let names: Vec<String> = header.iter().map(|name| name.trim().to_string()).collect();
    check_names(&names)?;
    if let Some(problem) = too_large(0, names.len()) {
        return Err(problem);
    }
    let mut rows = Vec::new();
    while let Some((line, fields)) = records.next_record()? {
        if fields.len() == 1 && fields[0].trim().is_empty() {
            continue;
        }
        if fields.len() != names.len() {
            return Err(format!(
                "line {line} has {} fields, the header {}",
                fields.len(),
                names.len()
            ));
        }
        if let Some(problem) = too_large(rows.len() + 1, names.len()) {
            return Err(problem);
        }
        rows.push(fields.iter().map(|field| Datum::of_text(field)).collect());
    }
    Ok((names, rows))
}

fn check_names(names: &[String]) -> Result<(), String> {
    let mut seen = std::collections::HashSet::new();
    match names.iter().find(|name| !seen.insert(name.as_str())) {
        Some(name) => Err(format!("the column `{name}` is named twice")),
        None => Ok(()),
    }
}

/// The records of a delimited text, one at a time.
struct Records<'t> {
    bytes: &'t [u8],
    at: usize,
    line: usize,
    delimiter: u8,
}

impl Records<'_> {
    /// The next record and the line it starts on; `None` at the end.
    fn next_record(&mut self) -> Result<Option<(usize, Vec<String>)>, String> {
        if self.at >= self.bytes.len() {
            return Ok(None);
        }
        let start_line = self.line;
        let mut fields = Vec::new();
        let mut field: Vec<u8> = Vec::new();
        let mut quoted = false;
        while self.at < self.bytes.len() {
            let byte = self.bytes[self.at];
            self.at += 1;
            if quoted {
                match byte {
                    b'"' if self.bytes.get(self.at) == Some(&b'"') => {
                        field.push(b'"');
                        self.at += 1;
                    }
                    b'"' => quoted = false,
                    b'\n' => {
                        self.line += 1;
                        field.push(byte);
                    }
                    _ => field.push(byte),
                }
                continue;
            }
            match byte {
                b'"' if field.iter().all(u8::is_ascii_whitespace) => {
                    field.clear();
                    quoted = true;
                }
                b'\n' => {
                    self.line += 1;
                    break;
                }
                b'\r' if self.bytes.get(self.at) == Some(&b'\n') => {}
                _ if byte == self.delimiter => fields.push(take(&mut field)),
                _ => field.push(byte),
            }
        }
        if quoted {
            return Err(format!("line {start_line}: a quoted field is never closed"));
        }
        fields.push(take(&mut field));
        Ok(Some((start_line, fields)))
    }
}

fn take(field: &mut Vec<u8>) -> String {
    // Split at ASCII bytes of valid UTF-8: still valid.
    String::from_utf8_lossy(&std::mem::take(field)).into_owned()
}

/// A JSON list of records, or an object whose one key holds one.
fn json_records(text: &str) -> Result<Rows, String> {
    let value: Value = serde_json::from_str(text).map_err(|error| format!("not JSON: {error}"))?;
    let records = match value {
        Value::Array(records) => records,
        Value::Object(map) => {
            if map.len() != 1 {
                return Err(format!(
                    "an object of {} keys; a plot reads a list of records, or an object whose one key holds one (`{{\"prc\": [{{...}}, ...]}}`)",
                    map.len()
                ));
            }
            let (key, inner) = map.into_iter().next().unwrap_or_default();
            match inner {
                Value::Array(records) => records,
                other => {
                    return Err(format!(
                        "`{key}` holds {}, not a list of records",
                        json_kind(&other)
                    ))
                }
            }
        }
        other => {
            return Err(format!(
                "{}; a plot reads a list of records (`[{{\"x\": 1, \"y\": 2}}, ...]`)",
                json_kind(&other)
            ))
        }
    };
    if let Some(problem) = too_large(records.len(), 1) {
        return Err(problem);
    }
    let mut builder = RecordRows::default();
    for (index, record) in records.iter().enumerate() {
        builder.push(record, || format!("record {}", index + 1))?;
    }
    Ok(builder.finish())
}

/// One JSON object per line.
fn json_lines(text: &str) -> Result<Rows, String> {
    let mut builder = RecordRows::default();
    for (index, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let record: Value = serde_json::from_str(line)
            .map_err(|error| format!("line {}: not JSON: {error}", index + 1))?;
        builder.push(&record, || format!("line {}", index + 1))?;
    }
    Ok(builder.finish())
}

fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// Records gathered into rows, the columns every key any record has, in
/// the order they first appear; a record without one has it empty.
#[derive(Default)]
struct RecordRows {
    names: Vec<String>,
    index: std::collections::HashMap<String, usize>,
    rows: Vec<Vec<Datum>>,
}

impl RecordRows {
    fn push(&mut self, record: &Value, place: impl Fn() -> String) -> Result<(), String> {
        let Value::Object(fields) = record else {
            return Err(format!(
                "{} is {}, not a record (an object of column: value)",
                place(),
                json_kind(record)
            ));
        };
        let mut row = vec![Datum::Empty; self.names.len()];
        for (name, value) in fields {
            let index = match self.index.get(name) {
                Some(&index) => index,
                None => {
                    self.index.insert(name.clone(), self.names.len());
                    self.names.push(name.clone());
                    row.push(Datum::Empty);
                    self.names.len() - 1
                }
            };
            row[index] = Datum::of_json(value);
        }
        // Checked as it grows: every row is as wide as the columns so far.
        if let Some(problem) = too_large(self.rows.len() + 1, self.names.len()) {
            return Err(problem);
        }
        self.rows.push(row);
        Ok(())
    }

    fn finish(mut self) -> Rows {
        let width = self.names.len();
        for row in &mut self.rows {
            row.resize(width, Datum::Empty);
        }
        (self.names, self.rows)
    }
}
