//! Hydra's sweep forms of a `-S` value under `pipe run -m`: values
//! comma-separated, `range(...)`, `choice(...)`.

use crate::project_files::yaml_text::yaml_float;

/// More runs than this in one sweep is a mistake, not a plan.
pub const MAX_COMBINATIONS: usize = 1000;

/// Hydra's sweep forms: `range(START,STOP[,STEP])` (STOP excluded, as
/// Python's and Hydra's), `choice(A,B,...)`; `glob(...)` and
/// `interval(...)` are named and refused, since they choose among config
/// groups or ask a sampler, which pipe does not have. `None`: no such form.
pub(super) fn hydra_form(value: &str) -> Option<std::result::Result<Vec<String>, String>> {
    let value = value.trim();
    let (name, inner) = value.strip_suffix(')')?.split_once('(')?;
    let arguments: Vec<String> = split_top_level(inner)
        .into_iter()
        .map(|argument| argument.trim().to_string())
        .collect();
    Some(match name.trim() {
        "choice" if arguments.iter().all(|argument| !argument.is_empty()) => Ok(arguments),
        "choice" => Err("`choice(...)` with an empty value".to_string()),
        "range" => range_values(&arguments),
        "glob" => Err("`glob(...)` selects among Hydra's config groups, which pipe has no notion of; list the values, comma-separated".to_string()),
        "interval" | "tag" => Err(format!("`{}(...)` is for Hydra's samplers (Optuna, Nevergrad); pipe sweeps a grid: list the values, comma-separated, or use `range(START,STOP,STEP)`", name.trim())),
        _ => return None,
    })
}

/// `range(START,STOP[,STEP])`: integers when every bound is one, else
/// floats, STOP excluded; at most `MAX_COMBINATIONS` values.
fn range_values(arguments: &[String]) -> std::result::Result<Vec<String>, String> {
    let usage = "`range(START,STOP)` or `range(START,STOP,STEP)` with numbers, STOP excluded";
    if !(2..=3).contains(&arguments.len()) {
        return Err(usage.to_string());
    }
    if arguments
        .iter()
        .all(|argument| argument.parse::<i64>().is_ok())
    {
        let numbers: Vec<i64> = arguments.iter().filter_map(|a| a.parse().ok()).collect();
        let (start, stop, step) = (numbers[0], numbers[1], *numbers.get(2).unwrap_or(&1));
        if step == 0 || (stop - start).signum() * step.signum() < 0 {
            return Err(format!(
                "{usage}: a step of {step} never gets from {start} to {stop}"
            ));
        }
        let count = (stop - start).unsigned_abs().div_ceil(step.unsigned_abs());
        if count > MAX_COMBINATIONS as u64 {
            return Err(format!("more than {MAX_COMBINATIONS} values"));
        }
        return Ok((0..count as i64)
            .map(|i| (start + i * step).to_string())
            .collect());
    }
    let numbers: Vec<f64> = arguments
        .iter()
        .map(|argument| {
            argument
                .parse::<f64>()
                .map_err(|_| format!("{usage}: `{argument}` is not a number"))
        })
        .collect::<std::result::Result<_, _>>()?;
    let (start, stop, step) = (numbers[0], numbers[1], *numbers.get(2).unwrap_or(&1.0));
    if !(start.is_finite() && stop.is_finite() && step.is_finite())
        || step == 0.0
        || (stop - start) * step < 0.0
    {
        return Err(format!(
            "{usage}: a step of {step} never gets from {start} to {stop}"
        ));
    }
    let count = ((stop - start) / step - 1e-9).ceil().max(0.0);
    if count > MAX_COMBINATIONS as f64 {
        return Err(format!("more than {MAX_COMBINATIONS} values"));
    }
    // Each value from the start, not by adding steps: no drift (0.30000000000000004).
    Ok((0..count as usize)
        .map(|i| {
            let value = start + i as f64 * step;
            let rounded = (value * 1e12).round() / 1e12;
            yaml_float(rounded)
        })
        .collect())
}

/// `1e-4,3e-4` -> [`1e-4`, `3e-4`]; commas inside `[...]`, `{...}` or
/// quotes belong to the value (`[1, 2],[3]` is two lists).
pub(super) fn split_top_level(value: &str) -> Vec<String> {
    let mut values = Vec::new();
    let mut current = String::new();
    let mut depth = 0usize;
    let mut quote: Option<char> = None;
    for c in value.chars() {
        match (quote, c) {
            (Some(open), c) if c == open => quote = None,
            (Some(_), _) => {}
            (None, '"' | '\'') => quote = Some(c),
            (None, '[' | '{') => depth += 1,
            (None, ']' | '}') => depth = depth.saturating_sub(1),
            (None, ',') if depth == 0 => {
                values.push(std::mem::take(&mut current));
                continue;
            }
            _ => {}
        }
        current.push(c);
    }
    values.push(current);
    values
}
