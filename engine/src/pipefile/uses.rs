//! `uses: name@version`: which catalog stage a stage runs.

use crate::project_files::yaml::Node;

/// `data/download@1` -> (`data/download`, 1).
pub(super) fn parse_uses(node: &Node) -> Option<(String, u32)> {
    let text = node.as_str()?;
    let (name, version) = text.rsplit_once('@')?;
    let segment_ok = |segment: &str| {
        let mut chars = segment.chars();
        chars
            .next()
            .is_some_and(|first| first.is_ascii_alphanumeric())
            && chars.all(|ch| ch.is_ascii_alphanumeric() || matches!(ch, '_' | '-' | '.'))
    };
    if !name.split('/').all(segment_ok) || !version.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let version: u32 = version.parse().ok()?;
    (version > 0).then(|| (name.to_string(), version))
}
