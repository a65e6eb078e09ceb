//! A user's value as a message quotes it: never a flood.

/// How much of a user's value a message quotes.
const EXCERPT_CHARS: usize = 80;

/// `text` as a message quotes it: whole when short, else its first 80
/// characters and its full size (`aaaa… (200000000 bytes)`), so a value
/// from a huge file never floods a terminal or a log.
pub fn excerpt(text: &str) -> String {
    match text.char_indices().nth(EXCERPT_CHARS) {
        Some((cut, _)) => format!("{}… ({} bytes)", &text[..cut], text.len()),
        None => text.to_string(),
    }
}
