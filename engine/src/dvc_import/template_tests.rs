use super::*;
use crate::project_files::source::Sources;

fn node(yaml: &str) -> Node {
    let mut sources = Sources::default();
    let file = sources.add(None, yaml.to_string());
    crate::project_files::yaml::parse(&sources, file)
        .expect("YAML")
        .expect("a document")
}

/// The params of the tests, and a stage iterating over `{a: 1, b: 2}`
/// made a matrix over `key` and `x`.
fn resolve_in<'n>(params: &'n Node) -> impl Fn(&[String]) -> Result<Meaning<'n>, String> + 'n {
    move |path: &[String]| {
        let steps: Vec<&str> = path.iter().map(String::as_str).collect();
        match steps.as_slice() {
            ["item", "x"] => Ok(Meaning::Matrix("${matrix.x}".to_string())),
            ["item"] => Ok(Meaning::Matrix("${matrix.item}".to_string())),
            ["key"] => Ok(Meaning::Matrix("${matrix.key}".to_string())),
            _ => {
                let mut value = params;
                for step in &steps {
                    value = value.get(step).ok_or_else(|| format!("no `{step}`"))?;
                }
                Ok(Meaning::Param {
                    path: steps.join("."),
                    value,
                })
            }
        }
    }
}

const PARAMS: &str = "lr: 0.001\nsmall: 1e-3\nname: base\nspaced: two words\nvar:\n  a:\n    b: deep\ntrain:\n  epochs: 3\n  fast: true\n  slow: false\n  tag: it's\n  layers: [64, 32]\n";

fn command(text: &str) -> Result<Rewritten, BadRef> {
    let params = node(PARAMS);
    let resolve = resolve_in(&params);
    rewrite(text, Place::Command, &resolve)
}

#[test]
fn item_and_key_references_become_matrix_references() {
    let done = command("python train.py --x ${item.x} --k ${key} --i ${item[x]}").unwrap();
    assert_eq!(
        done.text,
        "python train.py --x ${matrix.x} --k ${matrix.key} --i ${matrix.x}"
    );
    assert!(done.notes.is_empty());
}

#[test]
fn vars_become_params_at_their_dotted_path() {
    let done = command("run ${var.a.b} ${name} --lr ${lr}").unwrap();
    assert_eq!(
        done.text,
        "run ${params.var.a.b} ${params.name} --lr ${params.lr}"
    );
}

#[test]
fn a_literal_dollar_stays_and_an_escaped_brace_is_pipes_escape() {
    let done = command("echo $HOME $1 $$ \\${HOME} \"${name}\"").unwrap();
    assert_eq!(done.text, "echo $HOME $1 $$ $${HOME} \"${params.name}\"");
    // `\\${x}`: DVC keeps one backslash and the `${` as text.
    assert_eq!(command("echo \\\\${x}").unwrap().text, "echo \\$${x}");
    // A `${` without a `}` on its line is text to DVC.
    assert_eq!(command("echo ${\n}").unwrap().text, "echo $${\n}");
}

#[test]
fn a_dollar_before_a_reference_gets_the_value_itself() {
    // DVC's `$${name}` is a `$` and the value; pipe would read `$${`
    // as a literal `${`.
    let done = command("echo $${name}").unwrap();
    assert_eq!(done.text, "echo $base");
    assert_eq!(done.notes.len(), 1);
}

#[test]
fn a_value_printed_otherwise_by_python_is_written_as_dvc_prints_it() {
    let done = command("train --lr ${small}").unwrap();
    assert_eq!(done.text, "train --lr 0.001");
    assert!(done.notes[0].1.contains("`0.001`"), "{:?}", done.notes);
}

#[test]
fn a_value_of_several_words_is_spliced_raw_as_dvc_does() {
    let done = command("echo ${spaced}").unwrap();
    assert_eq!(done.text, "echo ${raw:params.spaced}");
    assert_eq!(done.notes.len(), 1);
    // In a path nothing is split: the param as it is.
    let params = node(PARAMS);
    let path = rewrite("out/${spaced}.txt", Place::Path, &resolve_in(&params)).unwrap();
    assert_eq!(path.text, "out/${params.spaced}.txt");
}

#[test]
fn a_mapping_in_a_command_unpacks_as_dvc_does() {
    let done = command("python train.py ${train}").unwrap();
    assert_eq!(
        done.text,
        "python train.py --epochs ${params.train.epochs} --fast --tag ${params.train.tag} --layers ${params.train.layers}"
    );
    assert_eq!(done.notes.len(), 2, "the two flags: {:?}", done.notes);
}

#[test]
fn what_dvc_refuses_is_refused() {
    let params = node(PARAMS);
    let error = rewrite("${train}", Place::Path, &resolve_in(&params)).unwrap_err();
    assert!(error.message.contains("a mapping"), "{error:?}");
    let error = command("echo ${train.layers}").unwrap_err();
    assert!(error.message.contains("a list"), "{error:?}");
    let error = command("echo ${a..b}").unwrap_err();
    assert_eq!((error.offset, error.len), (5, 7));
}

#[test]
fn text_is_not_interpolated_by_pipe_and_keeps_values() {
    let params = node(PARAMS);
    let done = rewrite(
        "trains ${name} on ${item}, cost $${name}",
        Place::Text,
        &resolve_in(&params),
    )
    .unwrap();
    assert_eq!(done.text, "trains base on ${item}, cost $base");
}

#[test]
fn paths_parse_as_dvc_reads_them() {
    assert_eq!(
        parse_path("a.b[0].c"),
        Some(vec!["a".into(), "b".into(), "0".into(), "c".into()])
    );
    assert_eq!(parse_path(""), None);
    assert_eq!(parse_path("a."), None);
    assert_eq!(parse_path("a[0"), None);
}
