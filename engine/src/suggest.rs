//! "Did you mean" for keys, stage names, params, outputs and runs, and the
//! lists of names a hint shows: a leaf, for every layer that says what it
//! knows.

/// The candidate closest to `word`, when it is close enough to be a typo.
pub fn did_you_mean<'a>(
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

/// Edit distance over characters where swapping two neighbours counts as
/// one edit (optimal string alignment), since `trian` for `train` is the
/// commonest typo.
pub(crate) fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let width = b.len() + 1;
    let mut table = vec![0usize; (a.len() + 1) * width];
    for (i, cell) in table.iter_mut().step_by(width).enumerate() {
        *cell = i;
    }
    for (j, cell) in table.iter_mut().take(width).enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (table[(i - 1) * width + j] + 1)
                .min(table[i * width + j - 1] + 1)
                .min(table[(i - 1) * width + j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(table[(i - 2) * width + j - 2] + 1);
            }
            table[i * width + j] = best;
        }
    }
    table[a.len() * width + b.len()]
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
        assert_eq!(edit_distance("trian", "train"), 1);
        assert_eq!(did_you_mean("trian", ["test", "train"]), Some("train"));
        assert_eq!(name_list(&["a", "b", "c"], 2), "`a`, `b` and 1 more");
    }
}
