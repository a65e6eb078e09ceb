//! The values of pipe's own environment variables that are credentials,
//! by their names: what a stage inherits and may print (an `env` dump, a
//! failing tool echoing its settings), masked in every line pipe shows
//! from a stage.

use std::sync::OnceLock;

/// Words that make a variable's name a credential's, compared on the
/// upper-cased name split at `_`: `AWS_SECRET_ACCESS_KEY`, `HF_TOKEN`,
/// `PGPASSWORD` (as a suffix), `GITHUB_TOKEN`, `API_KEY`.
const SECRET_WORDS: &[&str] = &[
    "SECRET",
    "TOKEN",
    "PASSWORD",
    "PASSWD",
    "CREDENTIAL",
    "CREDENTIALS",
    "PRIVATE",
    "APIKEY",
];

/// Names of two words that mean a credential together.
const SECRET_PAIRS: &[(&str, &str)] = &[("API", "KEY"), ("ACCESS", "KEY"), ("AUTH", "KEY")];

/// A value shorter than this is not masked: it would mask common text.
const SHORTEST: usize = 8;

/// The values of credential variables in this process's environment,
/// read once.
pub(crate) fn process_secrets() -> &'static [String] {
    static SECRETS: OnceLock<Vec<String>> = OnceLock::new();
    SECRETS.get_or_init(|| {
        let mut values: Vec<String> = std::env::vars_os()
            .filter_map(|(name, value)| Some((name.into_string().ok()?, value.into_string().ok()?)))
            .filter(|(name, value)| is_secret_name(name) && value.len() >= SHORTEST)
            .map(|(_, value)| value)
            .collect();
        // The longest first: a value holding another is masked whole.
        values.sort_by_key(|value| std::cmp::Reverse(value.len()));
        values.dedup();
        values
    })
}

fn is_secret_name(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    let words: Vec<&str> = upper.split('_').filter(|word| !word.is_empty()).collect();
    words.iter().any(|word| {
        SECRET_WORDS
            .iter()
            .any(|secret| word == secret || (word.ends_with(secret) && word.len() > secret.len()))
    }) || words
        .windows(2)
        .any(|pair| SECRET_PAIRS.contains(&(pair[0], pair[1])))
}

#[cfg(test)]
mod tests {
    use super::is_secret_name;

    #[test]
    fn credential_variables_are_known_by_their_names() {
        for name in [
            "AWS_SECRET_ACCESS_KEY",
            "AWS_ACCESS_KEY_ID",
            "HF_TOKEN",
            "GITHUB_TOKEN",
            "PGPASSWORD",
            "OPENAI_API_KEY",
            "aws_session_token",
            "GOOGLE_APPLICATION_CREDENTIALS",
        ] {
            assert!(is_secret_name(name), "{name}");
        }
        for name in [
            "PATH",
            "HOME",
            "KEYBOARD",
            "CI_COMMIT_BRANCH",
            "TOKENIZERS_PARALLELISM",
            "PIPE_REMOTE",
        ] {
            assert!(!is_secret_name(name), "{name}");
        }
    }
}
