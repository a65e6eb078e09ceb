//! How a value reads as text to DVC and to pipe. DVC puts a value into a
//! command as Python's `str()` of what its YAML reader made of it (`1e-3`
//! is `0.001`, `True` is `true`); pipe puts a number in as it is written.
//! Where the two differ, the converter writes DVC's text, so that a
//! command, and a file named after a value, stay what they were.

use crate::project_files::yaml::{Node, NodeValue, Resolved};

/// DVC's text for a scalar (`to_str` in dvc/parsing/interpolate.py);
/// `None` for a list or mapping.
pub(crate) fn dvc_text(node: &Node) -> Option<String> {
    let scalar = node.as_scalar()?;
    Some(match scalar.resolve() {
        Resolved::Null => "None".to_string(),
        Resolved::Bool(value) => value.to_string(),
        Resolved::Int(value) => value.to_string(),
        Resolved::Float(value) => python_float(value),
        Resolved::Str => scalar.text.clone(),
    })
}

/// pipe's text for a scalar in `${params.X}`: as written. `None` for a
/// null (pipe refuses to print one) and for collections.
pub(crate) fn pipe_text(node: &Node) -> Option<String> {
    let scalar = node.as_scalar()?;
    (!node.is_null()).then(|| scalar.text.clone())
}

/// Whether `${params.X}` gives the command DVC's text.
pub(crate) fn same_text(node: &Node) -> bool {
    matches!((dvc_text(node), pipe_text(node)), (Some(dvc), Some(pipe)) if dvc == pipe)
}

/// Python's `repr` of a float (`str` is the same since 3.2): the shortest
/// digits that read back, fixed notation for exponents -4 to 15, else
/// `d.ddde-XX` with at least two exponent digits.
pub(crate) fn python_float(value: f64) -> String {
    if value.is_nan() {
        return "nan".to_string();
    }
    if value.is_infinite() {
        return if value > 0.0 { "inf" } else { "-inf" }.to_string();
    }
    // Rust's `{:e}` gives the same shortest digits: `1.5e-7`.
    let scientific = format!("{value:e}");
    let (mantissa, exponent) = scientific.split_once('e').unwrap_or((&scientific, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    let negative = mantissa.starts_with('-');
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let sign = if negative { "-" } else { "" };
    // `decpt` as CPython counts it: the value is 0.DIGITS x 10^decpt.
    let decpt = exponent + 1;
    if decpt <= -4 || decpt > 16 {
        let (first, rest) = digits.split_at(1);
        let fraction = if rest.is_empty() {
            String::new()
        } else {
            format!(".{rest}")
        };
        let exp_sign = if exponent < 0 { '-' } else { '+' };
        return format!("{sign}{first}{fraction}e{exp_sign}{:02}", exponent.abs());
    }
    let count = digits.len() as i32;
    let body = if decpt <= 0 {
        format!("0.{}{digits}", "0".repeat((-decpt) as usize))
    } else if decpt < count {
        let (whole, fraction) = digits.split_at(decpt as usize);
        format!("{whole}.{fraction}")
    } else {
        format!("{digits}{}.0", "0".repeat((decpt - count) as usize))
    };
    format!("{sign}{body}")
}

/// Python's `shlex.quote`, which DVC applies to the strings of a mapping
/// it unpacks into a command.
pub(crate) fn shlex_quote(text: &str) -> String {
    if text.is_empty() {
        return "''".to_string();
    }
    let safe = text
        .chars()
        .all(|ch| ch.is_ascii_alphanumeric() || "@%+=:,./-_".contains(ch));
    if safe {
        text.to_string()
    } else {
        format!("'{}'", text.replace('\'', "'\"'\"'"))
    }
}

/// Whether a node is a list or a mapping (DVC's `is_map_or_seq`).
pub(crate) fn is_collection(node: &Node) -> bool {
    matches!(node.value, NodeValue::Seq(_) | NodeValue::Map(_))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_read_as_python_prints_them() {
        for (value, text) in [
            (0.001, "0.001"),
            (1e-3, "0.001"),
            (1e-5, "1e-05"),
            (0.0001, "0.0001"),
            (1.5e-7, "1.5e-07"),
            (5.0e-5, "5e-05"),
            (1.0, "1.0"),
            (100.0, "100.0"),
            (1e15, "1000000000000000.0"),
            (1e16, "1e+16"),
            (123.456, "123.456"),
            (-0.25, "-0.25"),
            (-2.5e-6, "-2.5e-06"),
            (f64::INFINITY, "inf"),
        ] {
            assert_eq!(python_float(value), text, "{value}");
        }
    }

    #[test]
    fn shlex_quotes_as_python_does() {
        assert_eq!(shlex_quote("plain-1.0/x"), "plain-1.0/x");
        assert_eq!(shlex_quote(""), "''");
        assert_eq!(shlex_quote("two words"), "'two words'");
        assert_eq!(shlex_quote("it's"), "'it'\"'\"'s'");
    }
}
