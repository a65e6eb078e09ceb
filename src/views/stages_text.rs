//! `pipe stages`: the workers' catalog as a list, and one stage's params,
//! outputs and metrics.

use std::fmt::Write;

use serde_json::Value;

use crate::views::value_text::width;

/// `pipe stages --check`: each built-in worker, and whether it agrees
/// with the catalog built into pipe.
pub fn worker_checks(checks: &[pipe_engine::WorkerCheck]) -> String {
    let mut out = String::new();
    for check in checks {
        let _ = match &check.outcome {
            Ok(stages) => writeln!(
                out,
                "{}: {stages} stages, as the catalog built into pipe describes them",
                check.path.display()
            ),
            Err(problem) => writeln!(out, "{}: {problem}", check.path.display()),
        };
    }
    out
}

pub fn stage_list(entries: &[pipe_engine::CatalogEntry]) -> String {
    let mut out = String::new();
    let name_width = width(entries.iter().map(|entry| entry.info.name.as_str())) + 3;
    for entry in entries {
        let id = format!("{}@{}", entry.info.name, entry.info.version);
        let _ = writeln!(out, "{id:<name_width$}  {}", entry.info.summary);
    }
    out
}

pub fn stage_detail(entry: &pipe_engine::CatalogEntry) -> String {
    let info = &entry.info;
    let mut out = String::new();
    let _ = writeln!(out, "{}@{}  {}", info.name, info.version, info.summary);
    let _ = writeln!(
        out,
        "implementation {}, worker {}",
        info.implementation,
        entry.worker.display()
    );
    let _ = writeln!(out, "\nparams (under `with:`)");
    let param_width = width(info.params.iter().map(|param| param.name.as_str()));
    for param in &info.params {
        let kind = match param.kind {
            pipe_protocol::ParamKind::Choice => param.choices.join("|"),
            other => serde_json::to_value(other)
                .ok()
                .and_then(|v| v.as_str().map(String::from))
                .unwrap_or_default(),
        };
        let default = match &param.default {
            None => "required".to_string(),
            Some(Value::Null) => "default: none".to_string(),
            Some(value) => format!("default: {value}"),
        };
        let _ = writeln!(
            out,
            "  {:<param_width$}  {kind}, {default}\n  {:<param_width$}  {}",
            param.name, "", param.doc
        );
    }
    let _ = writeln!(out, "\noutputs (`${{stages.STAGE.outs.NAME}}`)");
    let output_width = width(info.outputs.iter().map(|output| output.name.as_str()));
    for output in &info.outputs {
        let kind = match output.kind {
            pipe_protocol::OutputKind::File => "file",
            pipe_protocol::OutputKind::Dir => "directory",
        };
        let _ = writeln!(
            out,
            "  {:<output_width$}  {kind}: {}",
            output.name, output.doc
        );
    }
    if !info.metrics.is_empty() {
        let _ = writeln!(out, "\nmetrics: {}", info.metrics.join(", "));
    }
    out
}
