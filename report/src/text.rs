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

pub use pipe_protocol::format::format_number;

/// `text` with its first letter in upper case (a plot's title from its
/// metric's label).
pub fn capitalised(text: &str) -> String {
    let mut chars = text.chars();
    chars.next().map_or_else(String::new, |first| {
        first.to_uppercase().collect::<String>() + chars.as_str()
    })
}

/// Milliseconds since the Unix epoch as `2026-11-30 23:56:27 UTC`.
pub fn format_utc(ms: u64) -> String {
    format!("{} UTC", pipe_protocol::format::utc_date_time(ms))
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
