//! Plain scalars that a YAML 1.1 reader (PyYAML, what most scripts that
//! read `params.yaml` use) reads as another value than pipe does (YAML 1.2's
//! core schema): `1e-4` is a string to PyYAML, `yes` a boolean, `010` the
//! octal 8. A command that reads such a param by itself would use a value
//! the run does not record, so pipe warns where it is written.

use crate::pipeline::yaml_float;
use crate::project_files::yaml::Resolved;

/// What a YAML 1.1 reader makes of a scalar pipe reads otherwise.
pub(crate) struct Reading {
    /// `the string "1e-4"`.
    pub theirs: String,
    /// `the number 0.0001`.
    pub ours: String,
    /// What to write instead, read alike by both.
    pub fix: String,
}

const BOOLEAN_WORDS: [(&str, bool); 12] = [
    ("yes", true),
    ("Yes", true),
    ("YES", true),
    ("on", true),
    ("On", true),
    ("ON", true),
    ("no", false),
    ("No", false),
    ("NO", false),
    ("off", false),
    ("Off", false),
    ("OFF", false),
];

/// How a YAML 1.1 reader reads the plain scalar `text` differently from
/// `resolved`, pipe's reading, if it does.
pub(crate) fn differs_in_yaml_1_1(text: &str, resolved: Resolved) -> Option<Reading> {
    let unsigned = text.trim_start_matches(['-', '+']);
    match resolved {
        Resolved::Float(value) if !is_yaml11_float(unsigned) => Some(Reading {
            theirs: format!("the string \"{text}\""),
            ours: format!("the number {value}"),
            fix: yaml_float(value),
        }),
        Resolved::Int(value) if unsigned.len() > 1 && unsigned.starts_with('0') => {
            let digits = unsigned.trim_start_matches("0o");
            let theirs = if unsigned.bytes().all(|b| (b'0'..=b'7').contains(&b)) {
                let octal = i64::from_str_radix(digits, 8).ok()?;
                if octal == value.abs() {
                    return None;
                }
                format!("the octal number {octal}")
            } else if unsigned.starts_with("0x") {
                return None;
            } else {
                format!("the string \"{text}\"")
            };
            Some(Reading {
                theirs,
                ours: format!("the number {value}"),
                fix: value.to_string(),
            })
        }
        Resolved::Str => {
            if let Some((_, flag)) = BOOLEAN_WORDS.iter().find(|(word, _)| *word == text) {
                return Some(Reading {
                    theirs: format!("the boolean {flag}"),
                    ours: format!("the string \"{text}\""),
                    fix: format!("\"{text}\" (or {flag})"),
                });
            }
            let number = unsigned.replace('_', "");
            let looks_numeric = unsigned.contains('_')
                && !number.is_empty()
                && number.bytes().all(|b| b.is_ascii_digit() || b == b'.');
            let sexagesimal = is_sexagesimal(unsigned);
            let date = is_date(text);
            let theirs = if looks_numeric || sexagesimal {
                "a number"
            } else if date {
                "a date"
            } else {
                return None;
            };
            Some(Reading {
                theirs: theirs.to_string(),
                ours: format!("the string \"{text}\""),
                fix: format!("\"{text}\""),
            })
        }
        _ => None,
    }
}

/// PyYAML's float: a dot in the mantissa and a signed exponent, or the
/// infinities and NaN.
fn is_yaml11_float(unsigned: &str) -> bool {
    if matches!(
        unsigned,
        ".inf" | ".Inf" | ".INF" | ".nan" | ".NaN" | ".NAN"
    ) {
        return true;
    }
    let (mantissa, exponent) = match unsigned.find(['e', 'E']) {
        Some(at) => (&unsigned[..at], Some(&unsigned[at + 1..])),
        None => (unsigned, None),
    };
    mantissa.contains('.') && exponent.is_none_or(|exponent| exponent.starts_with(['+', '-']))
}

/// `1:30`: base 60 to YAML 1.1.
fn is_sexagesimal(unsigned: &str) -> bool {
    let mut parts = unsigned.split(':');
    let first = parts.next().unwrap_or("");
    let rest: Vec<&str> = parts.collect();
    !rest.is_empty()
        && first.starts_with(|c: char| ('1'..='9').contains(&c))
        && first.bytes().all(|b| b.is_ascii_digit() || b == b'_')
        && rest.iter().all(|part| {
            (1..=2).contains(&part.len())
                && part.bytes().all(|b| b.is_ascii_digit())
                && part.parse::<u32>().is_ok_and(|n| n < 60)
        })
}

/// `2024-01-31`: a date to YAML 1.1.
fn is_date(text: &str) -> bool {
    let parts: Vec<&str> = text.split('-').collect();
    parts.len() == 3
        && parts[0].len() == 4
        && (1..=2).contains(&parts[1].len())
        && (1..=2).contains(&parts[2].len())
        && parts
            .iter()
            .all(|part| part.bytes().all(|b| b.is_ascii_digit()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn theirs(text: &str, resolved: Resolved) -> Option<String> {
        differs_in_yaml_1_1(text, resolved).map(|reading| reading.theirs)
    }

    #[test]
    fn what_pyyaml_reads_otherwise_is_found() {
        assert_eq!(
            theirs("1e-4", Resolved::Float(1e-4)).as_deref(),
            Some("the string \"1e-4\"")
        );
        assert_eq!(
            theirs("1.0e5", Resolved::Float(1e5)).as_deref(),
            Some("the string \"1.0e5\"")
        );
        assert_eq!(
            theirs("yes", Resolved::Str).as_deref(),
            Some("the boolean true")
        );
        assert_eq!(
            theirs("OFF", Resolved::Str).as_deref(),
            Some("the boolean false")
        );
        assert_eq!(
            theirs("010", Resolved::Int(10)).as_deref(),
            Some("the octal number 8")
        );
        assert_eq!(theirs("1_000", Resolved::Str).as_deref(), Some("a number"));
        assert_eq!(theirs("1:30", Resolved::Str).as_deref(), Some("a number"));
        assert_eq!(
            theirs("2024-01-31", Resolved::Str).as_deref(),
            Some("a date")
        );
    }

    #[test]
    fn what_both_read_alike_is_left_alone() {
        for (text, resolved) in [
            ("0.001", Resolved::Float(0.001)),
            ("1.0e-05", Resolved::Float(1e-5)),
            ("-2.5", Resolved::Float(-2.5)),
            (".inf", Resolved::Float(f64::INFINITY)),
            ("42", Resolved::Int(42)),
            ("0", Resolved::Int(0)),
            ("0x1F", Resolved::Int(31)),
            ("bf16-mixed", Resolved::Str),
            ("true", Resolved::Bool(true)),
            ("y", Resolved::Str),
        ] {
            assert!(theirs(text, resolved).is_none(), "{text}");
        }
    }
}
