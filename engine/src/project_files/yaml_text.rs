//! Values written as YAML text that YAML 1.1 (PyYAML) and 1.2 readers
//! read alike: what pipe writes into params files, and how a `-S` value is
//! shown.

/// A float as YAML that both YAML 1.1 and 1.2 read as that float: a
/// dot in the mantissa and a signed exponent (`1.0e-05`; PyYAML reads
/// `1e-5` as a string).
pub fn yaml_float(value: f64) -> String {
    if value.is_nan() {
        return ".nan".to_string();
    }
    if value.is_infinite() {
        return if value > 0.0 { ".inf" } else { "-.inf" }.to_string();
    }
    let shortest = format!("{value:?}");
    let (mantissa, exponent) = match shortest.split_once('e') {
        Some((mantissa, exponent)) => (mantissa.to_string(), Some(exponent.to_string())),
        None => (shortest.clone(), None),
    };
    let mantissa = if mantissa.contains('.') {
        mantissa
    } else {
        format!("{mantissa}.0")
    };
    match exponent {
        None => mantissa,
        Some(exponent) => {
            let (sign, digits) = match exponent.strip_prefix('-') {
                Some(digits) => ('-', digits.to_string()),
                None => ('+', exponent.trim_start_matches('+').to_string()),
            };
            format!("{mantissa}e{sign}{digits:0>2}")
        }
    }
}

/// `text` as a YAML double-quoted scalar that YAML 1.1 (PyYAML) and 1.2
/// readers read back as `text`: `"` and `\\` escaped, and every character
/// that is not printable in YAML or that a reader takes for a line break
/// (C0 and C1 controls, DEL, NEL, U+2028, U+2029, the BOM, U+FFFE and
/// U+FFFF) written as an escape, never raw. PyYAML folds a raw NEL to a
/// space and refuses a raw DEL.
pub fn yaml_quoted(text: &str) -> String {
    let mut quoted = String::with_capacity(text.len() + 2);
    quoted.push('"');
    for ch in text.chars() {
        match ch {
            '"' => quoted.push_str("\\\""),
            '\\' => quoted.push_str("\\\\"),
            '\n' => quoted.push_str("\\n"),
            '\t' => quoted.push_str("\\t"),
            '\u{0}'..='\u{1f}'
            | '\u{7f}'..='\u{9f}'
            | '\u{2028}'
            | '\u{2029}'
            | '\u{feff}'
            | '\u{fffe}'
            | '\u{ffff}' => quoted.push_str(&format!("\\u{:04X}", ch as u32)),
            _ => quoted.push(ch),
        }
    }
    quoted.push('"');
    quoted
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_read_the_same_in_yaml_1_1_and_1_2() {
        assert_eq!(yaml_float(0.2), "0.2");
        assert_eq!(yaml_float(1e-5), "1.0e-05");
        assert_eq!(yaml_float(2.5e20), "2.5e+20");
        assert_eq!(yaml_float(3.0), "3.0");
        assert_eq!(yaml_float(f64::NEG_INFINITY), "-.inf");
    }

    #[test]
    fn quoted_strings_escape_what_is_not_printable_or_breaks_a_line() {
        assert_eq!(yaml_quoted("a \"b\" \\ c"), r#""a \"b\" \\ c""#);
        assert_eq!(yaml_quoted("x\ny\tz\r"), r#""x\ny\tz\u000D""#);
        assert_eq!(
            yaml_quoted("a\u{85}b\u{7f}c\u{9b}d\u{2028}e\u{feff}"),
            r#""a\u0085b\u007Fc\u009Bd\u2028e\uFEFF""#
        );
        assert_eq!(yaml_quoted("é ✓ 𝄞"), "\"é ✓ 𝄞\"");
    }
}
