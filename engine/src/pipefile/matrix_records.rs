//! A matrix written as a list of records (DVC's `foreach` over mappings,
//! Snakemake's `expand(zip)`): each record one expansion, each field an
//! axis its stages name as `${matrix.FIELD}`, so that `data/${matrix.batch}/
//! ${matrix.sample}` can be written where one value may not hold a `/`.
//!
//! ```yaml
//! matrix:
//!   - {batch: b1, sample: x}
//!   - {batch: b2, sample: y}
//! ```

use std::collections::HashSet;

use super::params;
use crate::pipeline::matrix::{MatrixAxis, MatrixValue};
use crate::project_files::collect::Diagnostics;
use crate::project_files::source::Sources;
use crate::project_files::yaml::Node;
use crate::Diagnostic;

/// The axes of a record matrix: one per field of the first record, each
/// holding every record's value of it. Every record must have exactly
/// those fields, and no two records the same values.
pub(super) fn record_axes(
    stage: &str,
    records: &[Node],
    sources: &Sources,
    diagnostics: &mut Diagnostics,
) -> Option<Vec<MatrixAxis>> {
    let hint = "write the matrix as a mapping of keys to lists, or as a list of records with the same fields, e.g.\nmatrix:\n  - {batch: b1, sample: x}\n  - {batch: b2, sample: y}";
    let Some(first) = records.first() else {
        diagnostics.push(
            Diagnostic::new(
                "empty-matrix",
                format!("`matrix` of stage `{stage}` is an empty list"),
            )
            .with_hint("give it at least one record, or remove `matrix`"),
        );
        return None;
    };
    let Some(fields) = first.as_map().filter(|fields| !fields.is_empty()) else {
        diagnostics.push(
            Diagnostic::new(
                "bad-type",
                format!("a matrix written as a list in stage `{stage}` must list records (mappings of fields to values)"),
            )
            .at(sources.location(first.span))
            .with_hint(hint),
        );
        return None;
    };
    let keys: Vec<String> = fields.iter().map(|field| field.key.clone()).collect();
    for field in fields {
        if !is_valid_identifier(&field.key) {
            diagnostics.push(
                Diagnostic::new("bad-matrix-key", format!("invalid matrix key `{}` in stage `{stage}`", field.key))
                    .at(sources.location(field.key_span))
                    .with_hint("matrix keys use letters, digits and `_`, and start with a letter or `_`, so `${matrix.KEY}` can name them"),
            );
            return None;
        }
    }
    let mut axes: Vec<MatrixAxis> = keys
        .iter()
        .map(|key| MatrixAxis {
            key: key.clone(),
            values: Vec::with_capacity(records.len()),
            group: 0,
        })
        .collect();
    let mut seen: HashSet<Vec<String>> = HashSet::with_capacity(records.len());
    let mut ok = true;
    for record in records {
        let Some(entries) = record.as_map() else {
            diagnostics.push(
                Diagnostic::new(
                    "bad-type",
                    format!("each record of the matrix of stage `{stage}` must be a mapping"),
                )
                .at(sources.location(record.span))
                .with_hint(hint),
            );
            ok = false;
            continue;
        };
        let names: Vec<&str> = entries.iter().map(|entry| entry.key.as_str()).collect();
        if names.len() != keys.len() || !keys.iter().all(|key| names.contains(&key.as_str())) {
            diagnostics.push(
                Diagnostic::new(
                    "bad-matrix-record",
                    format!(
                        "a record of the matrix of stage `{stage}` has the fields {}, the first has {}",
                        quoted(&names),
                        quoted(&keys.iter().map(String::as_str).collect::<Vec<_>>())
                    ),
                )
                .at(sources.location(record.span))
                .with_hint("give every record the same fields"),
            );
            ok = false;
            continue;
        }
        let mut texts = Vec::with_capacity(keys.len());
        let mut record_ok = true;
        for (axis, key) in axes.iter_mut().zip(&keys) {
            let Some(entry) = entries.iter().find(|entry| &entry.key == key) else {
                continue;
            };
            match matrix_value(stage, key, &entry.value, sources, diagnostics) {
                Some(value) => {
                    texts.push(value.text.clone());
                    axis.values.push(value);
                }
                None => record_ok = false,
            }
        }
        ok &= record_ok;
        if record_ok && !seen.insert(texts) {
            diagnostics.push(
                Diagnostic::new(
                    "duplicate-matrix-value",
                    format!("a record of the matrix of stage `{stage}` appears twice"),
                )
                .at(sources.location(record.span))
                .with_hint("remove the repeated record; each one must name a different stage"),
            );
            ok = false;
        }
    }
    ok.then_some(axes)
}

fn quoted(names: &[&str]) -> String {
    names
        .iter()
        .map(|name| format!("`{name}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

pub(super) fn is_valid_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|first| first.is_ascii_alphabetic() || first == '_')
        && chars.all(|ch| ch.is_ascii_alphanumeric() || ch == '_')
}

/// Why `text` cannot be a matrix value (`contains ` `), if it cannot:
/// values name stages, `train@seed=1`.
pub(super) fn bad_value_text(text: &str) -> Option<String> {
    let bad_char = text
        .chars()
        .find(|ch| ch.is_whitespace() || ch.is_control() || ",=@${}/\\\"'`*".contains(*ch));
    if text.is_empty() {
        Some("is empty".to_string())
    } else {
        bad_char.map(|ch| format!("contains `{}`", ch.escape_default()))
    }
}

/// One matrix value, checked: a scalar that can be part of a stage name.
pub(super) fn matrix_value(
    stage: &str,
    key: &str,
    item: &Node,
    sources: &Sources,
    diagnostics: &mut Diagnostics,
) -> Option<MatrixValue> {
    let Some(scalar) = item.as_scalar().filter(|_| !item.is_null()) else {
        diagnostics.push(
            Diagnostic::new(
                "bad-type",
                format!(
                    "values of `matrix.{key}` in stage `{stage}` must be strings, numbers or booleans, found {}",
                    item.describe()
                ),
            )
            .at(sources.location(item.span))
            .with_hint("each value becomes part of a stage name, like `train@seed=1`; use scalars"),
        );
        return None;
    };
    let text = scalar.text.clone();
    if let Some(what) = bad_value_text(&text) {
        diagnostics.push(
        Diagnostic::new(
            "bad-matrix-value",
            format!(
            "matrix value `{}` of `{key}` in stage `{stage}` {what}",
            pipe_protocol::excerpt(&pipe_protocol::redact::redact_text(&text))
            ),
        )
            .at(sources.location(item.span))
            .with_hint("matrix values name the expanded stages (`train@seed=1`): use letters, digits and `_ . - + :`"),
        );
        return None;
    }
    Some(MatrixValue {
        json: params::scalar_to_json(scalar),
        text,
    })
}
