//! `${namespace.path}` templates: parsing only. What a reference means is
//! decided by the stage resolver, which knows the params, matrix and stages.

use crate::project_files::source::Span;
use crate::project_files::yaml::Node;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Piece {
    Text(String),
    Ref(Reference),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Reference {
    /// The text between `${` and `}`, trimmed: `params.train.lr`.
    pub expr: String,
    /// Characters from the start of the string to the `$`.
    pub offset: usize,
    /// Characters from `$` to `}` inclusive.
    pub len: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TemplateError {
    pub offset: usize,
    pub len: usize,
    pub message: String,
    pub hint: String,
}

/// Splits `text` into literal text and references. `$${` is a literal
/// `${` for the shell; a `$` not followed by `{` is left alone.
pub(crate) fn parse(text: &str) -> Result<Vec<Piece>, TemplateError> {
    let chars: Vec<char> = text.chars().collect();
    let mut pieces = Vec::new();
    let mut literal = String::new();
    let mut index = 0;
    while index < chars.len() {
        let ch = chars[index];
        if ch == '$' && chars.get(index + 1) == Some(&'$') && chars.get(index + 2) == Some(&'{') {
            literal.push_str("${");
            index += 3;
            continue;
        }
        if ch == '$' && chars.get(index + 1) == Some(&'{') {
            let Some(close) = closing_brace(&chars, index + 2) else {
                return Err(TemplateError {
                    offset: index,
                    len: chars.len() - index,
                    message: "unterminated `${`: no closing `}`".to_string(),
                    hint: "close the reference with `}`; to pass a literal `${` to the shell write `$${`".to_string(),
                });
            };
            let expr: String = chars[index + 2..close]
                .iter()
                .collect::<String>()
                .trim()
                .to_string();
            if expr.is_empty() || !nested_references_are_matrix_keys(&expr) {
                return Err(TemplateError {
                    offset: index,
                    len: close + 1 - index,
                    message: "empty or nested reference".to_string(),
                    hint: "write a reference such as `${params.seed}`; inside a reference only `${matrix.KEY}` may appear \
                           (`${stages.train@precision=${matrix.precision}.outs.model}`); \
                           to pass a literal `${` to the shell write `$${`"
                        .to_string(),
                });
            }
            if !literal.is_empty() {
                pieces.push(Piece::Text(std::mem::take(&mut literal)));
            }
            pieces.push(Piece::Ref(Reference {
                expr,
                offset: index,
                len: close + 1 - index,
            }));
            index = close + 1;
            continue;
        }
        literal.push(ch);
        index += 1;
    }
    if !literal.is_empty() {
        pieces.push(Piece::Text(literal));
    }
    Ok(pieces)
}

/// The `}` closing a reference whose body starts at `start`, skipping
/// over one level of `${...}` inside it.
fn closing_brace(chars: &[char], start: usize) -> Option<usize> {
    let mut index = start;
    while index < chars.len() {
        match chars[index] {
            '}' => return Some(index),
            '$' if chars.get(index + 1) == Some(&'{') => {
                let inner = chars[index + 2..].iter().position(|c| *c == '}')?;
                index += 2 + inner + 1;
            }
            _ => index += 1,
        }
    }
    None
}

/// A reference may hold `${matrix.KEY}` (so that one matrix stage can
/// name the expansion of another with the same key), and nothing else.
fn nested_references_are_matrix_keys(expr: &str) -> bool {
    let mut rest = expr;
    while let Some(start) = rest.find("${") {
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            return false;
        };
        let inner = after[..end].trim();
        match inner.strip_prefix("matrix.") {
            Some(key) if !key.is_empty() && !key.contains(['$', '{']) => {}
            _ => return false,
        }
        rest = &after[end + 1..];
    }
    true
}

/// Replaces every `${matrix.KEY}` inside a reference's text with
/// `value_of(KEY)`; the first key without a value is the error.
pub(crate) fn substitute_matrix_keys(
    expr: &str,
    mut value_of: impl FnMut(&str) -> Option<String>,
) -> Result<String, &str> {
    let mut out = String::with_capacity(expr.len());
    let mut rest = expr;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after.find('}').unwrap_or(after.len());
        let key = after[..end].trim().trim_start_matches("matrix.");
        out.push_str(&value_of(key).ok_or(key)?);
        rest = after.get(end + 1..).unwrap_or("");
    }
    out.push_str(rest);
    Ok(out)
}

/// The span of `reference` inside the scalar `node`, when the scalar's
/// text can be found character for character in the source.
pub(crate) fn ref_span(node: &Node, reference: &Reference) -> Span {
    match node.as_scalar().and_then(|scalar| scalar.verbatim_col) {
        Some(col) => Span {
            col: col + reference.offset,
            len: reference.len,
            ..node.span
        },
        None => node.span,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_references_and_escapes() {
        let pieces = parse("echo $${HOME} $USER ${ params.seed }!").unwrap();
        assert_eq!(
            pieces,
            vec![
                Piece::Text("echo ${HOME} $USER ".to_string()),
                Piece::Ref(Reference {
                    expr: "params.seed".to_string(),
                    offset: 20,
                    len: 16
                }),
                Piece::Text("!".to_string()),
            ]
        );
        assert_eq!(parse("a ${params.x").unwrap_err().offset, 2);
        assert_eq!(parse("ü ${}").unwrap_err().offset, 2);
    }

    #[test]
    fn only_matrix_keys_nest_inside_a_reference() {
        let pieces = parse("${stages.train@p=${matrix.p}.outs.model}!").unwrap();
        assert_eq!(
            pieces[0],
            Piece::Ref(Reference {
                expr: "stages.train@p=${matrix.p}.outs.model".to_string(),
                offset: 0,
                len: 40
            })
        );
        for bad in [
            "${stages.t@p=${params.p}.outs.m}",
            "${stages.t@p=${matrix.}.outs.m}",
            "${a${matrix.p",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
        let values = |key: &str| (key == "p").then(|| "bf16".to_string());
        assert_eq!(
            substitute_matrix_keys("stages.t@p=${ matrix.p }.outs.m", values).unwrap(),
            "stages.t@p=bf16.outs.m"
        );
        assert_eq!(
            substitute_matrix_keys("stages.t@q=${matrix.q}.outs.m", values).unwrap_err(),
            "q"
        );
    }
}
