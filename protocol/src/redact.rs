//! Credentials inside URLs, masked wherever pipe shows or stores text.
//!
//! A URL may carry a password (`https://user:pass@host/`) or a token in
//! its query (`?access_token=...`, an S3 presigned `X-Amz-Signature`) or
//! in its fragment (`#access_token=...`, as OAuth's implicit flow returns
//! it); query and fragment are masked by the same rules.
//! The engine and the workers print URLs in messages, record them in the
//! run database and in key manifests that live in a shared cache; every
//! such text goes through [`redact_text`] (or [`redact_json`]) first. The
//! stage itself still receives the real URL.
//!
//! Redaction is purely textual, so it needs no URL parser and costs one
//! substring search on text without `://`.

use std::borrow::Cow;

use serde_json::Value;

/// What a secret is replaced with.
pub const MASK: &str = "***";

/// Query parameters whose value is masked. A name is compared after
/// percent-decoding, ignoring ASCII case and every `_`, `-` and `.`
/// ([`is_secret_query_param`]), so `access%5Ftoken`, `Access-Token`,
/// `accessToken` and `ACCESS_TOKEN` are one name. Only names that mean a
/// credential everywhere: a generic `key` is masked only when its value is
/// a Google API key, and `code` only beside an OAuth `state`
/// ([`mask_query`]), as many APIs use those names for *what* to fetch.
pub const SECRET_QUERY_PARAMS: &[&str] = &[
    "access_key",
    "access_token",
    "api_key",
    "api_token",
    "apikey",
    "auth",
    "auth_token",
    "authorization",
    "awsaccesskeyid",
    "bearer",
    "client_secret",
    "code_verifier",
    "deploy_token",
    "gh_token",
    "github_token",
    "hf_token",
    "id_token",
    "job_token",
    "jwt",
    "oauth_signature",
    "oauth_token",
    "ossaccesskeyid",
    "passwd",
    "password",
    "private_token",
    "refresh_token",
    "sas_token",
    "secret",
    "secret_key",
    "session_token",
    "sig",
    "signature",
    "token",
    "x_amz_credential",
    "x_amz_security_token",
    "x_amz_signature",
    "x_api_key",
    "x_auth_token",
    "x_access_token",
    "x_goog_credential",
    "x_goog_security_token",
    "x_goog_signature",
    "x_oss_credential",
    "x_oss_security_token",
    "x_oss_signature",
];

/// Whether `name`, a query parameter name as written in a URL, is one of
/// [`SECRET_QUERY_PARAMS`]: percent-escapes decoded (a writer may spell
/// `_` as `%5F` and any letter as its escape), `+` read as a space, ASCII
/// case ignored and `-` read as `_`.
pub fn is_secret_query_param(name: &str) -> bool {
    let normalized = normalized_param_name(name);
    SECRET_QUERY_PARAMS
        .iter()
        .any(|secret| without_separators(secret) == normalized)
}

fn without_separators(name: &str) -> String {
    name.chars()
        .filter(|c| !matches!(c, '_' | '-' | '.'))
        .collect()
}

/// A Google API key: `AIza` and 35 more characters of its alphabet.
fn is_google_api_key(value: &str) -> bool {
    value.len() == 39
        && value.starts_with("AIza")
        && value
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'_' | b'-'))
}

fn normalized_param_name(name: &str) -> String {
    let bytes = name.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        let byte = bytes[at];
        let escaped = (byte == b'%')
            .then(|| bytes.get(at + 1..at + 3))
            .flatten()
            .and_then(|hex| std::str::from_utf8(hex).ok())
            .and_then(|hex| u8::from_str_radix(hex, 16).ok());
        match escaped {
            Some(value) => {
                decoded.push(value);
                at += 3;
            }
            None => {
                decoded.push(if byte == b'+' { b' ' } else { byte });
                at += 1;
            }
        }
    }
    decoded
        .iter()
        .map(|&byte| char::from(byte.to_ascii_lowercase()))
        .filter(|c| !matches!(c, '_' | '-' | '.'))
        .collect::<String>()
        .trim()
        .to_string()
}

/// `text` with the userinfo and the secret query and fragment values of
/// every URL in it replaced by [`MASK`]. Borrowed when there was nothing to mask.
pub fn redact_text(text: &str) -> Cow<'_, str> {
    if !text.contains("://") {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    let mut changed = false;
    let mut search_from = 0;
    while let Some(found) = text[search_from..].find("://") {
        let separator = search_from + found;
        let scheme_start = scheme_start(text, separator);
        let end = url_end(text, separator + 3);
        search_from = end.max(separator + 3);
        let Some(scheme_start) = scheme_start else {
            continue;
        };
        if scheme_start < copied {
            continue;
        }
        let url = &text[scheme_start..end];
        if let Cow::Owned(masked) = redact_url(url) {
            out.push_str(&text[copied..scheme_start]);
            out.push_str(&masked);
            copied = end;
            changed = true;
        }
    }
    if !changed {
        return Cow::Borrowed(text);
    }
    out.push_str(&text[copied..]);
    Cow::Owned(out)
}

/// One URL (`scheme://...`) with its userinfo and the secret values of
/// its query and fragment masked. Borrowed when there was nothing to mask.
pub fn redact_url(url: &str) -> Cow<'_, str> {
    let Some(separator) = url.find("://") else {
        return Cow::Borrowed(url);
    };
    let authority_start = separator + 3;
    let authority_end = url[authority_start..]
        .find(['/', '?', '#'])
        .map_or(url.len(), |at| authority_start + at);
    let userinfo_end = url[authority_start..authority_end]
        .rfind('@')
        .map(|at| authority_start + at);
    // The fragment starts at the first `#`; a `?` after it is no query.
    let fragment_start = url[authority_end..].find('#').map(|at| authority_end + at);
    let query_end = fragment_start.unwrap_or(url.len());
    let masked_query = url[authority_end..query_end].find('?').and_then(|at| {
        let start = authority_end + at + 1;
        mask_query(&url[start..query_end]).map(|masked| (start, query_end, masked))
    });
    let masked_fragment = fragment_start.and_then(|at| {
        let start = at + 1;
        mask_fragment(&url[start..]).map(|masked| (start, url.len(), masked))
    });
    if userinfo_end.is_none() && masked_query.is_none() && masked_fragment.is_none() {
        return Cow::Borrowed(url);
    }
    let mut out = String::with_capacity(url.len());
    match userinfo_end {
        Some(at) => {
            out.push_str(&url[..authority_start]);
            out.push_str(MASK);
            out.push_str(&url[at..authority_end]);
        }
        None => out.push_str(&url[..authority_end]),
    }
    let mut copied = authority_end;
    for (start, end, masked) in [masked_query, masked_fragment].into_iter().flatten() {
        out.push_str(&url[copied..start]);
        out.push_str(&masked);
        copied = end;
    }
    out.push_str(&url[copied..]);
    Cow::Owned(out)
}

/// Masks the secret values in a fragment (without `#`) by the rules of a
/// query: OAuth's implicit flow returns `#access_token=...&token_type=...`,
/// and a single-page app's route may come first (`#/callback?id_token=...`),
/// so the pairs after a `?` are masked too. `None` when it holds none, so a
/// plain `#section` stays as it is.
fn mask_fragment(fragment: &str) -> Option<String> {
    let whole = mask_query(fragment);
    let masked = whole.as_deref().unwrap_or(fragment);
    let after_route = masked.find('?').and_then(|at| {
        mask_query(&masked[at + 1..]).map(|pairs| format!("{}{pairs}", &masked[..=at]))
    });
    after_route.or(whole)
}

/// Masks the values of secret parameters in a query (without `?`); `None`
/// when it holds none. Pairs are separated by `&` or `;` (the older form
/// HTML 4 recommended, which many servers still split on), and each
/// separator is kept as written.
fn mask_query(query: &str) -> Option<String> {
    // An OAuth callback (`?code=...&state=...`): its code is a credential.
    let oauth_callback = query
        .split(['&', ';'])
        .any(|pair| normalized_param_name(pair.split('=').next().unwrap_or("")) == "state");
    let secret = |name: &str, value: &str| {
        is_secret_query_param(name)
            || match normalized_param_name(name).as_str() {
                "key" => is_google_api_key(value),
                "code" => oauth_callback,
                _ => false,
            }
    };
    let mut changed = false;
    let mut out = String::with_capacity(query.len());
    let mut rest = query;
    loop {
        let end = rest.find(['&', ';']).unwrap_or(rest.len());
        let pair = &rest[..end];
        match pair.split_once('=') {
            Some((name, value)) if secret(name, value) && value != MASK => {
                changed = true;
                out.push_str(name);
                out.push('=');
                out.push_str(MASK);
            }
            _ => out.push_str(pair),
        }
        if end == rest.len() {
            break;
        }
        out.push_str(&rest[end..=end]);
        rest = &rest[end + 1..];
    }
    changed.then_some(out)
}

/// Where the scheme ending at `separator` (the index of `://`) starts, if
/// there is one: letters, digits, `+`, `-`, `.`, beginning with a letter.
fn scheme_start(text: &str, separator: usize) -> Option<usize> {
    let bytes = text.as_bytes();
    let mut start = separator;
    while start > 0
        && (bytes[start - 1].is_ascii_alphanumeric()
            || matches!(bytes[start - 1], b'+' | b'-' | b'.'))
    {
        start -= 1;
    }
    while start < separator && !bytes[start].is_ascii_alphabetic() {
        start += 1;
    }
    (start < separator).then_some(start)
}

/// Where a URL that continues at `from` ends in free text: at whitespace,
/// a quote, or an angle bracket.
fn url_end(text: &str, from: usize) -> usize {
    text[from..]
        .find(|c: char| {
            c.is_whitespace() || c.is_control() || matches!(c, '"' | '\'' | '`' | '<' | '>')
        })
        .map_or(text.len(), |at| from + at)
}

/// Masks every string inside `value` with [`redact_text`], in place.
pub fn redact_json(value: &mut Value) {
    match value {
        Value::String(text) => {
            if let Cow::Owned(masked) = redact_text(text) {
                *text = masked;
            }
        }
        Value::Array(items) => items.iter_mut().for_each(redact_json),
        Value::Object(map) => map.values_mut().for_each(redact_json),
        _ => {}
    }
}

/// A masked copy of `value`.
pub fn redacted_json(value: &Value) -> Value {
    let mut copy = value.clone();
    redact_json(&mut copy);
    copy
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn userinfo_and_secret_query_values_are_masked() {
        assert_eq!(
            redact_url("http://user:pass@127.0.0.1:8080/f.csv?access_token=S3CR3T&x=1#frag"),
            "http://***@127.0.0.1:8080/f.csv?access_token=***&x=1#frag"
        );
        assert_eq!(
            redact_url("https://TOKEN@github.com/o/r.git"),
            "https://***@github.com/o/r.git"
        );
        assert_eq!(
            redact_url("https://b.s3.amazonaws.com/k?X-Amz-Credential=AK%2F1&X-Amz-Signature=ab12"),
            "https://b.s3.amazonaws.com/k?X-Amz-Credential=***&X-Amz-Signature=***"
        );
    }

    #[test]
    fn secret_fragment_values_are_masked_by_the_rules_of_the_query() {
        assert_eq!(
            redact_url("https://host/data.csv#access_token=TOKEN"),
            "https://host/data.csv#access_token=***"
        );
        assert_eq!(
            redact_url("https://h/cb#state=s1&ID_Token=eyJ.x.y&token_type=bearer"),
            "https://h/cb#state=s1&ID_Token=***&token_type=bearer"
        );
        assert_eq!(
            redact_url("https://h#/callback?access_token=T&x=1"),
            "https://h#/callback?access_token=***&x=1"
        );
        assert_eq!(
            redact_url("https://u:p@h/f?sig=S&page=2#frag=1&token=T"),
            "https://***@h/f?sig=***&page=2#frag=1&token=***"
        );
        // A `?` after the `#` starts no query: the part before it is kept.
        assert_eq!(
            redact_url("https://h/f#top?password=pw"),
            "https://h/f#top?password=***"
        );
        assert_eq!(
            redact_url("https://h/f#a=1?token=T"),
            "https://h/f#a=1?token=***"
        );
        assert_eq!(
            redact_url("https://h/f#token=ab?cd&x=1"),
            "https://h/f#token=***&x=1"
        );
        assert_eq!(
            redact_text("fetch 'https://h/d.csv#access_token=TOKEN' now"),
            "fetch 'https://h/d.csv#access_token=***' now"
        );
    }

    #[test]
    fn secret_names_are_compared_decoded_and_split_on_semicolons_too() {
        assert_eq!(
            redact_url("https://h/cb#access%5Ftoken=T1"),
            "https://h/cb#access%5Ftoken=***"
        );
        assert_eq!(
            redact_url("https://h/cb#state=s;access_token=T2"),
            "https://h/cb#state=s;access_token=***"
        );
        assert_eq!(
            redact_url("https://h/f?access%5Ftoken=T3&page=2"),
            "https://h/f?access%5Ftoken=***&page=2"
        );
        assert_eq!(
            redact_url("https://gitlab.example/api/v4/f?private_token=glpat-T4"),
            "https://gitlab.example/api/v4/f?private_token=***"
        );
        assert_eq!(
            redact_url("https://h/f?%61ccess-Token=T5;x=1&X-Amz-Signature=T6"),
            "https://h/f?%61ccess-Token=***;x=1&X-Amz-Signature=***"
        );
        assert_eq!(
            redact_url("https://h/f?job_token=T7&AWSAccessKeyId=T8&x-oss-signature=T9"),
            "https://h/f?job_token=***&AWSAccessKeyId=***&x-oss-signature=***"
        );
        // A `%` that starts no escape is kept as a character of the name.
        assert!(matches!(
            redact_url("https://h/f?a%=1;b=%zz"),
            Cow::Borrowed(_)
        ));
    }

    #[test]
    fn urls_without_credentials_are_borrowed_unchanged() {
        for url in [
            "https://example.com/a@b/c?key=data&page=2",
            "file:///tmp/x.csv",
            "https://h/p?tokens=5",
            "https://h/p#frag",
            "https://h/p?page=2#section-3",
            "https://h/p#page=2&tokens=5",
            "https://h/p#access_token=***",
        ] {
            assert!(matches!(redact_url(url), Cow::Borrowed(_)), "{url}");
        }
        assert!(matches!(redact_text("no urls here"), Cow::Borrowed(_)));
    }

    #[test]
    fn every_url_in_free_text_is_masked() {
        let text =
            "curl -fsSL 'https://u:p@h.example/a?token=t1' -o x && wget url=http://h2/b?sig=zz ok";
        assert_eq!(
            redact_text(text),
            "curl -fsSL 'https://***@h.example/a?token=***' -o x && wget url=http://h2/b?sig=*** ok"
        );
        assert_eq!(redact_text("://odd"), "://odd");
    }

    #[test]
    fn json_strings_are_masked_at_any_depth() {
        let mut value = serde_json::json!({
            "url": "http://a:b@h/x",
            "mirrors": ["http://h/y?password=pw"],
            "n": 3
        });
        redact_json(&mut value);
        assert_eq!(
            value,
            serde_json::json!({"url": "http://***@h/x", "mirrors": ["http://h/y?password=***"], "n": 3})
        );
    }
}
