//! Text as it lands in a report: escaped for HTML or for a Markdown table
//! cell, and numbers with four significant digits.

/// `text` safe inside HTML element content and quoted attribute values.
pub fn escape_html(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for ch in text.chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(ch),
        }
    }
    out
}

/// `text` as literal Markdown inline text, safe in a table cell and a
/// heading: HTML is shown, not interpreted (`&lt;`), Markdown punctuation
/// is backslash-escaped, `|` cannot end a cell, and a line break becomes
/// `<br>` instead of ending the table row.
pub fn escape_markdown(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(ch) = chars.next() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '\r' => {
                if chars.peek() != Some(&'\n') {
                    out.push_str("<br>");
                }
            }
            '\n' => out.push_str("<br>"),
            '\\' | '`' | '*' | '_' | '[' | ']' | '|' | '#' | '~' | '!' => {
                out.push('\\');
                out.push(ch);
            }
            _ => out.push(ch),
        }
    }
    out
}

/// A number as a reader wants it: at most four significant digits
/// (`0.4196`, `12.35`, `1.235e-05`), whole numbers of four or more digits
/// in full (`12346`), no trailing zeros, `-0` as `0`. NaN and the
/// infinities are named.
pub fn format_number(value: f64) -> String {
    if value.is_nan() {
        return "NaN".into();
    }
    if value.is_infinite() {
        return if value > 0.0 { "inf" } else { "-inf" }.into();
    }
    if value == 0.0 {
        return "0".into();
    }
    let magnitude = value.abs();
    if magnitude >= 1000.0 {
        let rounded = value.round();
        return if rounded == 0.0 {
            "0".into()
        } else {
            format!("{rounded:.0}")
        };
    }
    if magnitude < 1e-4 {
        let text = format!("{value:.3e}");
        // `1.235e-5`: mantissa trimmed, exponent written as Rust does.
        return match text.split_once('e') {
            Some((mantissa, exponent)) => format!("{}e{exponent}", trim_zeros(mantissa)),
            None => text,
        };
    }
    // Digits after the point for 4 significant digits; rounding may carry
    // into a new digit (9.9996 -> 10.00), which the trim then shortens.
    let integer_digits = magnitude.log10().floor() as i32 + 1;
    let decimals = (4 - integer_digits).max(0) as usize;
    let text = format!("{value:.decimals$}");
    let text = trim_zeros(&text);
    if text == "-0" {
        "0".into()
    } else {
        text.to_string()
    }
}

fn trim_zeros(text: &str) -> &str {
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.')
    } else {
        text
    }
}

/// `text` with its first letter in upper case (a plot's title from its
/// metric's label).
pub fn capitalised(text: &str) -> String {
    let mut chars = text.chars();
    chars.next().map_or_else(String::new, |first| {
        first.to_uppercase().collect::<String>() + chars.as_str()
    })
}

/// A duration in milliseconds as seconds with four significant digits
/// (`12.35 s`), or minutes and seconds from ten minutes on (`12 min 5 s`).
pub fn format_duration_ms(ms: u64) -> String {
    let seconds = ms as f64 / 1000.0;
    if seconds < 600.0 {
        format!("{} s", format_number(seconds))
    } else {
        let whole = (ms + 500) / 1000;
        format!("{} min {} s", whole / 60, whole % 60)
    }
}

/// Milliseconds since the Unix epoch as `2026-11-30 23:56:27 UTC`.
pub fn format_utc(ms: u64) -> String {
    let seconds = ms / 1000;
    let days = (seconds / 86_400) as i64;
    let time = seconds % 86_400;
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC",
        time / 3600,
        time / 60 % 60,
        time % 60
    )
}

/// The proleptic Gregorian date of a day count since 1970-01-01 (Howard
/// Hinnant's civil-from-days, in 400-year eras).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let shifted_month = (5 * day_of_year + 2) / 153;
    let day = (day_of_year - (153 * shifted_month + 2) / 5 + 1) as u32;
    let month = if shifted_month < 10 {
        shifted_month + 3
    } else {
        shifted_month - 9
    } as u32;
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_keep_four_significant_digits() {
        let cases = [
            (0.4196236128689813, "0.4196"),
            (12.3456, "12.35"),
            (9.99996, "10"),
            (0.5, "0.5"),
            (-3.0, "-3"),
            (12345.678, "12346"),
            (1000.0, "1000"),
            (0.000012346, "1.235e-5"),
            (-0.00001, "-1e-5"),
            (0.0, "0"),
            (-0.0, "0"),
            (1.0, "1"),
            (999.96, "1000"),
            (f64::NAN, "NaN"),
            (f64::NEG_INFINITY, "-inf"),
        ];
        for (value, expected) in cases {
            assert_eq!(format_number(value), expected, "{value}");
        }
    }

    #[test]
    fn hostile_text_is_inert_in_html_and_markdown() {
        let hostile = "<script>alert('x')</script> a|b\nc";
        let html = escape_html(hostile);
        assert!(!html.contains('<') && !html.contains('\''), "{html}");
        let markdown = escape_markdown(hostile);
        assert_eq!(
            markdown,
            "&lt;script&gt;alert('x')&lt;/script&gt; a\\|b<br>c"
        );
        assert!(!markdown.contains('\n'));
        assert_eq!(escape_markdown("a\r\nb\rc"), "a<br>b<br>c");
    }

    #[test]
    fn dates_are_utc_calendar_dates() {
        assert_eq!(format_utc(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(format_utc(951_782_400_000), "2000-02-29 00:00:00 UTC");
        assert_eq!(format_utc(1_796_083_587_000), "2026-12-01 00:06:27 UTC");
    }

    #[test]
    fn durations_read_as_seconds_or_minutes() {
        assert_eq!(format_duration_ms(1234), "1.234 s");
        assert_eq!(format_duration_ms(0), "0 s");
        assert_eq!(format_duration_ms(725_400), "12 min 5 s");
    }
}
