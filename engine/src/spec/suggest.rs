//! "Did you mean" for keys, stage names, params and outputs.

/// The candidate closest to `word`, when it is close enough to be a typo.
pub(crate) fn did_you_mean<'a>(
    word: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    let word_len = word.chars().count();
    let threshold = (word_len / 3).max(1);
    let lowercase = word.to_lowercase();
    let mut best: Option<(usize, &str)> = None;
    for candidate in candidates {
        if candidate == word {
            continue;
        }
        let candidate_len = candidate.chars().count();
        // Cheap bound first: the distance is at least the length difference,
        // which keeps this fast against 100,000 matrix stage names.
        if candidate_len.abs_diff(word_len) > threshold {
            continue;
        }
        let distance = if candidate.to_lowercase() == lowercase {
            0
        } else {
            edit_distance(word, candidate)
        };
        if distance <= threshold && best.is_none_or(|(best_distance, _)| distance < best_distance) {
            best = Some((distance, candidate));
        }
    }
    best.map(|(_, candidate)| candidate)
}

/// Levenshtein distance over characters.
pub(crate) fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    let mut current = vec![0; b.len() + 1];
    for (i, a_char) in a.chars().enumerate() {
        current[0] = i + 1;
        for (j, b_char) in b.iter().enumerate() {
            let substitution = previous[j] + usize::from(a_char != *b_char);
            current[j + 1] = substitution.min(previous[j + 1] + 1).min(current[j] + 1);
        }
        std::mem::swap(&mut previous, &mut current);
    }
    previous[b.len()]
}

/// `a, b, c` or `a, b, c and 7 more`, each name in backticks.
pub(crate) fn name_list<S: AsRef<str>>(names: &[S], max: usize) -> String {
    let shown: Vec<String> = names
        .iter()
        .take(max)
        .map(|name| format!("`{}`", name.as_ref()))
        .collect();
    let mut text = shown.join(", ");
    if names.len() > max {
        text.push_str(&format!(" and {} more", names.len() - max));
    }
    text
}

/// "did you mean `x`?" followed by `known`, or just `known`.
pub(crate) fn hint_with_suggestion(suggestion: Option<&str>, known: String) -> String {
    match suggestion {
        Some(suggestion) => format!("did you mean `{suggestion}`? {known}"),
        None => known,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggests_close_names_only() {
        assert_eq!(did_you_mean("dep", ["run", "deps", "outs"]), Some("deps"));
        assert_eq!(did_you_mean("Deps", ["deps"]), Some("deps"));
        assert_eq!(did_you_mean("zzzzzz", ["deps", "outs"]), None);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(name_list(&["a", "b", "c"], 2), "`a`, `b` and 1 more");
    }
}
