//! `data/from-csv@1`: a CSV or TSV table (optionally gzip or bzip2
//! compressed) to one JSONL dataset `{text, label, ...}`.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::{json, Map, Value};

use pipe_protocol::{excerpt, ParamSpec};

use super::table::Table;
use crate::params::unset_is_empty;
use crate::{
    BuiltinStage, OutputKind, ParamKind, Result, StageContext, StageError, StageInfo,
    StageInfoBuilder,
};

pub struct FromCsv;

impl BuiltinStage for FromCsv {
    fn info(&self) -> StageInfo {
        StageInfoBuilder::new(
            "data/from-csv",
            1,
            "a CSV/TSV table (plain, .gz or .bz2) to a JSONL dataset {text, label}",
        )
        // 2: records `label_names`.
        .implementation(2)
        .params([
            ParamSpec::new(
                "file",
                ParamKind::Path,
                None,
                "the table: .csv or .tsv, optionally compressed as .gz or .bz2 (detected from its first bytes)",
            ),
            ParamSpec::new(
                "delimiter",
                ParamKind::String,
                Some(Value::Null),
                "one character (`\\t` or `tab` for a tab); unset: tab for .tsv/.tab files, `,` otherwise",
            ),
            ParamSpec::new("text_column", ParamKind::String, None, "the column holding the text"),
            ParamSpec::new("label_column", ParamKind::String, None, "the column holding the label"),
            ParamSpec::new(
                "labels",
                ParamKind::Any,
                Some(Value::Null),
                "label value -> class id, e.g. {fresh: 1, rotten: 0} (or a list: position = class id); rows \
                 with another value are dropped; unset: the column holds integers",
            ),
            ParamSpec::new(
                "filter",
                ParamKind::Any,
                Some(Value::Null),
                "column -> allowed values, e.g. {lang: [en]}; other rows are dropped",
            ),
            ParamSpec::new(
                "keep_columns",
                ParamKind::StringList,
                Some(json!([])),
                "more columns copied into each record as text",
            ),
            ParamSpec::new(
                "has_header",
                ParamKind::Bool,
                Some(json!(true)),
                "the first row names the columns; false: columns are named by position, 0, 1, 2, ...",
            ),
        ])
        .output(
            "dataset",
            OutputKind::File,
            "JSONL, one kept row a line in file order: text, label, then keep_columns",
        )
        .metrics([
            "rows_read",
            "rows_kept",
            "dropped.label_not_in_labels",
            "dropped.filtered",
            "dropped.empty_text",
            "invalid_utf8_rows",
            "labels.<class id>",
            "label_names.<class id>",
        ])
        .makes_data()
        .build()
    }

    fn run(&self, context: &StageContext) -> Result<()> {
        let params: CsvParams = context.params()?;
        let file = params.file.clone();
        let options = Options::new(params, &file)?;
        let total = std::fs::metadata(&file).map(|meta| meta.len()).ok();
        let mut table = Table::open(&file, options.delimiter)?;
        let mut record = csv::ByteRecord::new();
        let columns = table.columns(&mut record, options.has_header)?;
        let plan = Plan::new(&options, &columns, &file)?;

        let path = context.output("dataset");
        let mut out = BufWriter::new(File::create(&path).map_err(|e| StageError::io(&path, e))?);
        let mut stats = Stats::default();
        // Without a header, the record read for the columns is a row.
        let mut first = !options.has_header;
        loop {
            if !first && !table.next(&mut record)? {
                break;
            }
            first = false;
            stats.rows_read += 1;
            let Some((label, object)) = kept_row(&record, &options, &plan, &file, &mut stats)?
            else {
                continue;
            };
            let line_text = serde_json::to_string(&Value::Object(object))
                .map_err(|e| StageError::Other(e.to_string()))?;
            out.write_all(line_text.as_bytes())
                .and_then(|()| out.write_all(b"\n"))
                .map_err(|e| StageError::io(&path, e))?;
            *stats.per_label.entry(label).or_default() += 1;
            stats.kept += 1;
            context.progress("read", table.bytes_read(), total, "bytes");
        }
        out.flush().map_err(|e| StageError::io(&path, e))?;
        context.progress_done("read", table.bytes_read(), "bytes");
        report(context, &file, &options, &stats)
    }
}

/// A row as its JSONL record with its class id, or None for a row that is
/// dropped (and counted in `stats`: filtered, a label outside `labels`, an
/// empty text).
fn kept_row(
    record: &csv::ByteRecord,
    options: &Options,
    plan: &Plan,
    file: &Path,
    stats: &mut Stats,
) -> Result<Option<(i64, Map<String, Value>)>> {
    let line = record.position().map_or(0, |position| position.line());
    let mut lossy = false;
    let mut field = |index: usize| -> String {
        let bytes = record.get(index).unwrap_or_default();
        match std::str::from_utf8(bytes) {
            Ok(text) => text.to_string(),
            Err(_) => {
                lossy = true;
                String::from_utf8_lossy(bytes).into_owned()
            }
        }
    };
    if !plan
        .filter
        .iter()
        .all(|(index, allowed)| allowed.iter().any(|value| value == field(*index).trim()))
    {
        stats.filtered += 1;
        return Ok(None);
    }
    let label_value = field(plan.label);
    let label = match &options.labels {
        Some(mapping) => match mapping.get(label_value.trim()) {
            Some(class) => *class,
            None => {
                stats.unmapped.add(label_value.trim());
                return Ok(None);
            }
        },
        None => label_value.trim().parse::<i64>().map_err(|_| {
            StageError::input(
                format!(
                    "`{}` line {line}: label `{}` in column `{}` is not an integer",
                    file.display(),
                    excerpt(&label_value),
                    excerpt(&options.label_column)
                ),
                "map the column's values to class ids with `labels:`, e.g. labels: {positive: 1, negative: 0}",
            )
        })?,
    };
    let text = field(plan.text);
    if text.trim().is_empty() {
        stats.empty_text += 1;
        return Ok(None);
    }
    let mut object = Map::new();
    object.insert("text".into(), Value::String(text));
    object.insert("label".into(), json!(label));
    for (name, index) in &plan.keep {
        object.insert(name.clone(), Value::String(field(*index)));
    }
    if lossy {
        stats.invalid_utf8_rows += 1;
    }
    Ok(Some((label, object)))
}

/// The stage's last lines and its metrics; an error when no row was kept.
fn report(context: &StageContext, file: &Path, options: &Options, stats: &Stats) -> Result<()> {
    if stats.kept == 0 {
        return Err(StageError::input(
            format!(
                "no row of `{}` was kept ({} read)",
                file.display(),
                stats.rows_read
            ),
            format!(
                "check `labels:` and `filter:` against the values in the file{}",
                stats
                    .unmapped
                    .summary(&options.label_column)
                    .map(|text| format!(" ({text})"))
                    .unwrap_or_default()
            ),
        ));
    }
    if let Some(summary) = stats.unmapped.summary(&options.label_column) {
        context.message(format!("dropped {summary}"));
    }
    if stats.invalid_utf8_rows > 0 {
        context.message(format!(
            "{} rows had invalid UTF-8, replaced by U+FFFD",
            stats.invalid_utf8_rows
        ));
    }
    let per_label: Map<String, Value> = stats
        .per_label
        .iter()
        .map(|(label, rows)| (label.to_string(), json!(rows)))
        .collect();
    context.message(format!(
        "kept {} of {} rows ({})",
        stats.kept,
        stats.rows_read,
        stats
            .per_label
            .iter()
            .map(|(label, rows)| format!("label {label}: {rows}"))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    context.write_metrics(&json!({
        "rows_read": stats.rows_read,
        "rows_kept": stats.kept,
        "dropped": {
            "label_not_in_labels": stats.unmapped.rows(),
            "filtered": stats.filtered,
            "empty_text": stats.empty_text,
        },
        "invalid_utf8_rows": stats.invalid_utf8_rows,
        "labels": per_label,
        "label_names": label_names(options.labels.as_ref()),
    }))
}

/// Class id -> the label value(s) in the file that `labels` maps to it
/// (`{"0": "rotten", "1": "fresh"}`), for reports to name the classes;
/// values sharing an id are joined with ` / `. Empty without `labels`.
fn label_names(labels: Option<&BTreeMap<String, i64>>) -> Map<String, Value> {
    let mut by_id: BTreeMap<i64, Vec<&str>> = BTreeMap::new();
    for (value, id) in labels.into_iter().flatten() {
        by_id.entry(*id).or_default().push(value);
    }
    by_id
        .into_iter()
        .map(|(id, values)| (id.to_string(), json!(values.join(" / "))))
        .collect()
}

#[derive(Default)]
struct Stats {
    rows_read: u64,
    kept: u64,
    filtered: u64,
    empty_text: u64,
    unmapped: Unmapped,
    per_label: BTreeMap<i64, u64>,
    /// Kept rows with invalid UTF-8, replaced by U+FFFD.
    invalid_utf8_rows: u64,
}

/// The most distinct label values outside `labels` counted one by one:
/// a file may hold millions (an id column taken for the label), and each
/// would cost memory for the whole run.
const MAX_UNMAPPED_VALUES: usize = 10_000;

/// Rows dropped for a label value outside `labels`, counted per value for
/// the first [`MAX_UNMAPPED_VALUES`] distinct values; rows of any later
/// new value are only counted. Values are kept as shown (their excerpts),
/// so a huge value costs no more than its excerpt.
#[derive(Default)]
struct Unmapped {
    per_value: BTreeMap<String, u64>,
    untracked_rows: u64,
}

impl Unmapped {
    fn add(&mut self, value: &str) {
        let shown = excerpt(value);
        if let Some(rows) = self.per_value.get_mut(shown.as_str()) {
            *rows += 1;
        } else if self.per_value.len() < MAX_UNMAPPED_VALUES {
            self.per_value.insert(shown, 1);
        } else {
            self.untracked_rows += 1;
        }
    }

    fn rows(&self) -> u64 {
        self.per_value.values().sum::<u64>() + self.untracked_rows
    }

    /// `3 rows whose `category` is not in `labels`: plot (2), ? (1)`.
    fn summary(&self, column: &str) -> Option<String> {
        let total = self.rows();
        if total == 0 {
            return None;
        }
        let mut values: Vec<(&String, &u64)> = self.per_value.iter().collect();
        values.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        let shown: Vec<String> = values
            .iter()
            .take(5)
            .map(|(value, rows)| format!("`{value}` ({rows})"))
            .collect();
        let others = values.len() - shown.len();
        let more = if self.untracked_rows > 0 {
            format!(
                " and more than {others} more values (counted one by one: the first {MAX_UNMAPPED_VALUES})"
            )
        } else if others > 0 {
            format!(" and {others} more values")
        } else {
            String::new()
        };
        Some(format!(
            "{total} rows whose `{}` is not in `labels`: {}{more}",
            excerpt(column),
            shown.join(", ")
        ))
    }
}

/// The stage's params, one field per `ParamSpec` of its `info()`, as
/// given; [`Options`] is what the stage makes of them.
#[derive(Deserialize)]
struct CsvParams {
    file: PathBuf,
    delimiter: Option<String>,
    text_column: String,
    label_column: String,
    /// A mapping or a list, or null (`parse_labels`).
    labels: Value,
    /// A mapping, or null (`parse_filter`).
    filter: Value,
    #[serde(deserialize_with = "unset_is_empty")]
    keep_columns: Vec<String>,
    has_header: bool,
}

struct Options {
    delimiter: u8,
    text_column: String,
    label_column: String,
    /// Label value (trimmed) -> class id.
    labels: Option<BTreeMap<String, i64>>,
    /// Column -> allowed values (trimmed).
    filter: Vec<(String, Vec<String>)>,
    keep_columns: Vec<String>,
    has_header: bool,
}

impl Options {
    fn new(params: CsvParams, file: &Path) -> Result<Options> {
        let delimiter = match params.delimiter.as_deref() {
            None => {
                let name = file
                    .file_name()
                    .map(|name| name.to_string_lossy().to_lowercase())
                    .unwrap_or_default();
                let name = name.trim_end_matches(".gz").trim_end_matches(".bz2");
                if name.ends_with(".tsv") || name.ends_with(".tab") {
                    b'\t'
                } else {
                    b','
                }
            }
            Some("\\t" | "\t" | "tab") => b'\t',
            Some(text) if text.len() == 1 => text.as_bytes()[0],
            Some(text) => {
                return Err(StageError::param(
                    "delimiter",
                    format!("must be one ASCII character, not `{}`", excerpt(text)),
                    "write `delimiter: \";\"`, or `delimiter: tab` for tab-separated files",
                ))
            }
        };
        let keep_columns = params.keep_columns;
        for name in &keep_columns {
            if name == "text" || name == "label" {
                return Err(StageError::param(
                    "keep_columns",
                    format!("`{name}` would overwrite the record's own `{name}` field"),
                    "text_column and label_column are already written as `text` and `label`",
                ));
            }
        }
        Ok(Options {
            delimiter,
            text_column: params.text_column,
            label_column: params.label_column,
            labels: parse_labels(&params.labels)?,
            filter: parse_filter(&params.filter)?,
            keep_columns,
            has_header: params.has_header,
        })
    }
}

fn scalar_text(value: &Value) -> Option<String> {
    match value {
        Value::String(text) => Some(text.trim().to_string()),
        Value::Number(number) => Some(number.to_string()),
        Value::Bool(flag) => Some(flag.to_string()),
        _ => None,
    }
}

fn parse_labels(value: &Value) -> Result<Option<BTreeMap<String, i64>>> {
    let hint = "write `labels: {fresh: 1, rotten: 0}` (value in the file -> integer class id) or `labels: [rotten, fresh]`";
    match value {
        Value::Null => Ok(None),
        Value::Object(mapping) if !mapping.is_empty() => mapping
            .iter()
            .map(|(key, class)| match class.as_i64() {
                Some(class) => Ok((key.trim().to_string(), class)),
                None => Err(StageError::param(
                    "labels",
                    format!("class id of `{key}` must be an integer, not `{class}`"),
                    hint,
                )),
            })
            .collect::<Result<_>>()
            .map(Some),
        Value::Array(values) if !values.is_empty() => {
            let mut mapping = BTreeMap::new();
            for (class, value) in values.iter().enumerate() {
                let key = scalar_text(value).ok_or_else(|| {
                    StageError::param("labels", format!("`{value}` is not a label value"), hint)
                })?;
                if mapping.insert(key.clone(), class as i64).is_some() {
                    return Err(StageError::param(
                        "labels",
                        format!("`{key}` is listed twice"),
                        hint,
                    ));
                }
            }
            Ok(Some(mapping))
        }
        other => Err(StageError::param(
            "labels",
            format!("must be a non-empty mapping or list, not `{other}`"),
            hint,
        )),
    }
}

fn parse_filter(value: &Value) -> Result<Vec<(String, Vec<String>)>> {
    let hint = "write `filter: {column: [allowed, values]}`";
    match value {
        Value::Null => Ok(Vec::new()),
        Value::Object(mapping) => mapping
            .iter()
            .map(|(column, allowed)| {
                let values: Option<Vec<String>> = match allowed {
                    Value::Array(items) => items.iter().map(scalar_text).collect(),
                    single => scalar_text(single).map(|text| vec![text]),
                };
                values
                    .map(|values| (column.clone(), values))
                    .ok_or_else(|| {
                        StageError::param(
                            "filter",
                            format!("allowed values of `{column}` must be text or numbers"),
                            hint,
                        )
                    })
            })
            .collect(),
        other => Err(StageError::param(
            "filter",
            format!("must be a mapping, not `{other}`"),
            hint,
        )),
    }
}

/// Column positions resolved against the header.
struct Plan {
    text: usize,
    label: usize,
    filter: Vec<(usize, Vec<String>)>,
    keep: Vec<(String, usize)>,
}

impl Plan {
    fn new(options: &Options, columns: &[String], file: &Path) -> Result<Plan> {
        let find = |param: &str, name: &str| -> Result<usize> {
            columns.iter().position(|column| column == name).ok_or_else(|| {
                let suggestion = closest(name, columns).map(|close| format!("did you mean `{close}`? ")).unwrap_or_default();
                let mut shown: Vec<String> =
                    columns.iter().take(20).map(|column| format!("`{}`", excerpt(column))).collect();
                if columns.len() > shown.len() {
                    shown.push(format!("and {} more", columns.len() - shown.len()));
                }
                StageError::param(
                    param,
                    format!(
                        "`{}` has no column `{}`; its columns: {}",
                        file.display(),
                        excerpt(name),
                        shown.join(", ")
                    ),
                    format!(
                        "{suggestion}{}",
                        if options.has_header {
                            "column names are matched exactly, as in the header row"
                        } else {
                            "with `has_header: false` columns are named by position: 0, 1, 2, ..."
                        }
                    ),
                )
            })
        };
        Ok(Plan {
            text: find("text_column", &options.text_column)?,
            label: find("label_column", &options.label_column)?,
            filter: options
                .filter
                .iter()
                .map(|(column, allowed)| Ok((find("filter", column)?, allowed.clone())))
                .collect::<Result<_>>()?,
            keep: options
                .keep_columns
                .iter()
                .map(|column| Ok((column.clone(), find("keep_columns", column)?)))
                .collect::<Result<_>>()?,
        })
    }
}

/// The column most like `name` (case or a typo or two apart), if any.
fn closest<'a>(name: &str, columns: &'a [String]) -> Option<&'a str> {
    let wanted = name.to_lowercase();
    let wanted_chars = wanted.chars().count();
    columns
        .iter()
        .filter(|column| {
            // Lengths further apart than the tolerance cannot be close; this
            // also spares the edit distance (and its memory) for a huge
            // header field.
            let chars = column.chars().count();
            chars.abs_diff(wanted_chars) <= 2.max(chars / 4)
        })
        .map(|column| (edit_distance(&wanted, &column.to_lowercase()), column))
        .filter(|(distance, column)| *distance <= 2.max(column.chars().count() / 4))
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, column)| column.as_str())
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut current = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let substitution = previous[j] + usize::from(ca != *cb);
            current[j + 1] = substitution.min(previous[j + 1] + 1).min(current[j] + 1);
        }
        previous = current;
    }
    previous[b.len()]
}
