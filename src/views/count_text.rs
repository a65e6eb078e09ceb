//! A count with its noun in the number it takes: `1 file`, `3 files`,
//! never `file(s)`.

/// `count` followed by `one` or `many`.
pub fn counted(count: usize, one: &str, many: &str) -> String {
    match count {
        1 => format!("1 {one}"),
        _ => format!("{count} {many}"),
    }
}

#[cfg(test)]
mod tests {
    use super::counted;

    #[test]
    fn one_takes_the_singular_and_every_other_count_the_plural() {
        assert_eq!(counted(1, "run record", "run records"), "1 run record");
        assert_eq!(counted(0, "run record", "run records"), "0 run records");
        assert_eq!(counted(2, "file", "files"), "2 files");
    }
}
