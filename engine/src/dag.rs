//! The stage graph: edges come from dependencies on other stages' outputs.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet};
use std::fmt::Write as _;

use crate::pipeline::{Dep, Pipeline};
use crate::{Diagnostic, EngineError, Result};

/// Stages are indexed as in `Pipeline::stages`.
#[derive(Debug, Clone)]
pub struct Dag {
    /// For each stage, the stages it depends on (deduplicated, sorted).
    pub upstream: Vec<Vec<usize>>,
    /// For each stage, the stages that depend on it.
    pub downstream: Vec<Vec<usize>>,
    /// A topological order (dependencies first; ties in declaration order).
    pub order: Vec<usize>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DagFormat {
    Ascii,
    Dot,
    Mermaid,
}

/// Longer names do not widen the ascii name column further, so that one
/// long matrix name does not push every arrow off the screen.
const MAX_NAME_COLUMN: usize = 40;

impl Dag {
    /// Fails with a located `cycle` diagnostic naming the stages on a cycle.
    pub fn build(pipeline: &Pipeline) -> Result<Dag> {
        let stages = &pipeline.stages;
        let index_by_name: HashMap<&str, usize> = stages
            .iter()
            .enumerate()
            .map(|(index, stage)| (stage.name.as_str(), index))
            .collect();

        let mut upstream: Vec<Vec<usize>> = Vec::with_capacity(stages.len());
        for (index, stage) in stages.iter().enumerate() {
            let mut producers = Vec::new();
            for dep in &stage.deps {
                let Some(producer) = &dep.producer else {
                    continue;
                };
                let Some(&producer_index) = index_by_name.get(producer.stage.as_str()) else {
                    return Err(EngineError::Spec(vec![Diagnostic::new(
                        "unknown-stage",
                        format!(
                            "stage `{}` depends on unknown stage `{}`",
                            stage.name, producer.stage
                        ),
                    )
                    .at(dep.location.clone())
                    .with_hint("refer to a stage declared under `stages:`")]));
                };
                if producer_index == index {
                    return Err(EngineError::Spec(vec![self_cycle(pipeline, index, dep)]));
                }
                producers.push(producer_index);
            }
            producers.sort_unstable();
            producers.dedup();
            upstream.push(producers);
        }

        wait_for_the_run(pipeline, &mut upstream);
        let mut downstream: Vec<Vec<usize>> = vec![Vec::new(); stages.len()];
        for (index, producers) in upstream.iter().enumerate() {
            for &producer in producers {
                downstream[producer].push(index);
            }
        }

        // Kahn's algorithm; the min-heap keeps ties in declaration order.
        let mut waiting_on: Vec<usize> = upstream.iter().map(Vec::len).collect();
        let mut ready: BinaryHeap<Reverse<usize>> = (0..stages.len())
            .filter(|&index| waiting_on[index] == 0)
            .map(Reverse)
            .collect();
        let mut order = Vec::with_capacity(stages.len());
        while let Some(Reverse(index)) = ready.pop() {
            order.push(index);
            for &consumer in &downstream[index] {
                waiting_on[consumer] -= 1;
                if waiting_on[consumer] == 0 {
                    ready.push(Reverse(consumer));
                }
            }
        }
        if order.len() < stages.len() {
            return Err(EngineError::Spec(vec![cycle(
                pipeline,
                &upstream,
                &waiting_on,
            )]));
        }
        Ok(Dag {
            upstream,
            downstream,
            order,
        })
    }

    /// Indices of `targets` and everything they depend on, in topological order.
    pub fn closure(&self, targets: &[usize]) -> Vec<usize> {
        let mut wanted = vec![false; self.upstream.len()];
        let mut stack: Vec<usize> = targets
            .iter()
            .copied()
            .filter(|&target| target < wanted.len())
            .collect();
        while let Some(index) = stack.pop() {
            if std::mem::replace(&mut wanted[index], true) {
                continue;
            }
            stack.extend(
                self.upstream[index]
                    .iter()
                    .copied()
                    .filter(|&producer| !wanted[producer]),
            );
        }
        self.order
            .iter()
            .copied()
            .filter(|&index| wanted[index])
            .collect()
    }

    pub fn render(&self, pipeline: &Pipeline, format: DagFormat) -> String {
        let name = |index: usize| {
            pipeline
                .stages
                .get(index)
                .map_or("?", |stage| stage.name.as_str())
        };
        let mut text = String::new();
        match format {
            DagFormat::Ascii => {
                let width = self
                    .order
                    .iter()
                    .map(|&index| name(index).chars().count())
                    .max()
                    .unwrap_or(0)
                    .min(MAX_NAME_COLUMN);
                let _ = writeln!(
                    text,
                    "pipeline `{}`: {} stages, dependencies first",
                    pipeline.name,
                    self.order.len()
                );
                for &index in &self.order {
                    let inputs: Vec<&str> = self.upstream[index]
                        .iter()
                        .map(|&producer| name(producer))
                        .collect();
                    if inputs.is_empty() {
                        let _ = writeln!(text, "  {}", name(index));
                    } else {
                        let _ =
                            writeln!(text, "  {:<width$}  <- {}", name(index), inputs.join(", "));
                    }
                }
            }
            DagFormat::Dot => {
                let _ = writeln!(text, "digraph \"{}\" {{", dot_escape(&pipeline.name));
                let _ = writeln!(text, "  rankdir=LR;");
                let _ = writeln!(text, "  node [shape=box];");
                for &index in &self.order {
                    let _ = writeln!(text, "  \"{}\";", dot_escape(name(index)));
                }
                for &index in &self.order {
                    for &consumer in &self.downstream[index] {
                        let _ = writeln!(
                            text,
                            "  \"{}\" -> \"{}\";",
                            dot_escape(name(index)),
                            dot_escape(name(consumer))
                        );
                    }
                }
                text.push_str("}\n");
            }
            DagFormat::Mermaid => {
                // Stage names contain `@`, `=` and `,`, which Mermaid ids
                // cannot: nodes get positional ids and quoted labels.
                text.push_str("flowchart TD\n");
                for &index in &self.order {
                    let _ = writeln!(
                        text,
                        "  s{index}[\"{}\"]",
                        name(index).replace('"', "#quot;")
                    );
                }
                for &index in &self.order {
                    for &consumer in &self.downstream[index] {
                        let _ = writeln!(text, "  s{index} --> s{consumer}");
                    }
                }
            }
        }
        text
    }
}

impl Dag {
    /// The graph as `pipe dag` shows it by default: one line per matrix
    /// base, as Snakemake's `--rulegraph` (`clean ×200`, `aggregate  <-
    /// clean ×200`), in the order of the stages; a base with one stage is
    /// that stage's name. Linear in stages and edges.
    pub fn render_by_matrix(&self, pipeline: &Pipeline) -> String {
        let base_of = |index: usize| -> &str {
            let name = pipeline
                .stages
                .get(index)
                .map_or("?", |stage| stage.name.as_str());
            name.split('@').next().unwrap_or(name)
        };
        let mut order: Vec<&str> = Vec::new();
        let mut members: HashMap<&str, Vec<usize>> = HashMap::new();
        for &index in &self.order {
            let base = base_of(index);
            let entry = members.entry(base).or_default();
            if entry.is_empty() {
                order.push(base);
            }
            entry.push(index);
        }
        let label = |base: &str| -> String {
            match members[base].as_slice() {
                [only] => pipeline.stages[*only].name.clone(),
                many => format!("{base} ×{}", many.len()),
            }
        };
        let labels: Vec<String> = order.iter().map(|base| label(base)).collect();
        let width = labels
            .iter()
            .map(|label| label.chars().count())
            .max()
            .unwrap_or(0)
            .min(MAX_NAME_COLUMN);
        let mut text = String::new();
        if order.len() == self.order.len() {
            let _ = writeln!(
                text,
                "pipeline `{}`: {} stages, dependencies first",
                pipeline.name,
                self.order.len()
            );
        } else {
            let _ = writeln!(
                text,
                "pipeline `{}`: {} stages in {} groups, dependencies first (-v: every stage)",
                pipeline.name,
                self.order.len(),
                order.len()
            );
        }
        for (base, label) in order.iter().zip(&labels) {
            // Each producing base once, with how many of its stages feed
            // this group.
            let mut inputs: Vec<(&str, HashSet<usize>)> = Vec::new();
            for &index in &members[base] {
                for &producer in &self.upstream[index] {
                    let producer_base = base_of(producer);
                    match inputs.iter_mut().find(|(seen, _)| *seen == producer_base) {
                        Some((_, stages)) => {
                            stages.insert(producer);
                        }
                        None => inputs.push((producer_base, HashSet::from([producer]))),
                    }
                }
            }
            if inputs.is_empty() {
                let _ = writeln!(text, "  {label}");
                continue;
            }
            let shown: Vec<String> = inputs
                .iter()
                .map(
                    |(producer, stages)| match (members[producer].len(), stages.len()) {
                        (1, _) => label_of_one(pipeline, &members[producer]),
                        (all, feeding) if all == feeding => format!("{producer} ×{all}"),
                        (all, feeding) => format!("{producer} ×{feeding} of {all}"),
                    },
                )
                .collect();
            let _ = writeln!(text, "  {label:<width$}  <- {}", shown.join(", "));
        }
        text
    }
}

fn label_of_one(pipeline: &Pipeline, members: &[usize]) -> String {
    members
        .first()
        .and_then(|index| pipeline.stages.get(*index))
        .map_or_else(|| "?".to_string(), |stage| stage.name.clone())
}

/// A stage that reports on its run waits for the run: it depends on every
/// stage that nothing else waits for, except those that read what a
/// report wrote (a stage publishing the report comes after it, not
/// before). Linear in stages and edges.
fn wait_for_the_run(pipeline: &Pipeline, upstream: &mut [Vec<usize>]) {
    let readers: Vec<usize> = (0..upstream.len())
        .filter(|&index| pipeline.stages[index].reads_run())
        .collect();
    if readers.is_empty() {
        return;
    }
    let mut downstream: Vec<Vec<usize>> = vec![Vec::new(); upstream.len()];
    for (index, producers) in upstream.iter().enumerate() {
        for &producer in producers {
            downstream[producer].push(index);
        }
    }
    // Readers and whatever reads them, however indirectly.
    let mut after_a_report = vec![false; upstream.len()];
    let mut stack = readers.clone();
    while let Some(index) = stack.pop() {
        if std::mem::replace(&mut after_a_report[index], true) {
            continue;
        }
        stack.extend(downstream[index].iter().copied());
    }
    let waited_for = |index: usize| downstream[index].iter().any(|&down| !after_a_report[down]);
    let last: Vec<usize> = (0..upstream.len())
        .filter(|&index| !after_a_report[index] && !waited_for(index))
        .collect();
    for reader in readers {
        let producers = &mut upstream[reader];
        producers.extend(last.iter().copied());
        producers.sort_unstable();
        producers.dedup();
    }
}

fn dot_escape(text: &str) -> String {
    text.replace('\\', "\\\\").replace('"', "\\\"")
}

fn self_cycle(pipeline: &Pipeline, index: usize, dep: &Dep) -> Diagnostic {
    let stage = &pipeline.stages[index];
    let out = dep
        .producer
        .as_ref()
        .map_or("", |producer| producer.out.as_str());
    let shown_path = if dep.path == out {
        String::new()
    } else {
        format!(" (`{}`)", dep.path)
    };
    Diagnostic::new("cycle", format!("stage `{}` depends on its own output `{out}`{shown_path}", stage.name))
        .at(dep.location.clone().or_else(|| stage.location.clone()))
        .with_hint(format!(
            "a stage cannot read what it writes; in its own command write `${{outs.{out}}}`, and if the file is also an input, give the output another path"
        ))
}

/// Names one cycle among the stages Kahn's algorithm could not order
/// (`waiting_on` > 0), starting at the first declared.
fn cycle(pipeline: &Pipeline, upstream: &[Vec<usize>], waiting_on: &[usize]) -> Diagnostic {
    let stuck = |index: usize| waiting_on[index] > 0;
    let Some(start) = (0..waiting_on.len()).find(|&index| stuck(index)) else {
        return Diagnostic::new("cycle", "the stages depend on each other in a cycle");
    };
    // Every stuck stage waits on a stuck producer, so walking producers
    // from any stuck stage must come back to a stage already seen.
    let mut position_in_walk: HashMap<usize, usize> = HashMap::new();
    let mut walk = Vec::new();
    let mut current = start;
    while !position_in_walk.contains_key(&current) {
        position_in_walk.insert(current, walk.len());
        walk.push(current);
        match upstream[current]
            .iter()
            .copied()
            .find(|&producer| stuck(producer))
        {
            Some(producer) => current = producer,
            None => break,
        }
    }
    let loop_start = position_in_walk.get(&current).copied().unwrap_or(0);
    // The walk goes consumer -> producer; show data flow, producer first.
    let mut members: Vec<usize> = walk[loop_start..].iter().rev().copied().collect();
    if let Some(first) = members
        .iter()
        .enumerate()
        .min_by_key(|(_, &index)| index)
        .map(|(position, _)| position)
    {
        members.rotate_left(first);
    }

    let stages = &pipeline.stages;
    let mut names: Vec<String> = members
        .iter()
        .map(|&index| format!("`{}`", stages[index].name))
        .collect();
    if let Some(first) = names.first().cloned() {
        names.push(first);
    }
    let mut diagnostic = Diagnostic::new(
        "cycle",
        format!(
            "the stages depend on each other in a cycle: {}",
            names.join(" -> ")
        ),
    )
    .at(members
        .first()
        .and_then(|&index| stages[index].location.clone()))
    .with_hint(
        "`a -> b` means `b` reads an output of `a`; remove or redirect one of these dependencies",
    );
    for (position, &producer) in members.iter().enumerate() {
        let consumer = members[(position + 1) % members.len()];
        let producer_name = &stages[producer].name;
        if let Some(dep) = stages[consumer].deps.iter().find(|dep| {
            dep.producer
                .as_ref()
                .is_some_and(|reference| &reference.stage == producer_name)
        }) {
            let at = dep.location.as_ref().map_or_else(String::new, |location| {
                format!(
                    " ({}:{}:{})",
                    location.file.display(),
                    location.line,
                    location.col
                )
            });
            diagnostic = diagnostic.with_note(format!(
                "`{}` reads `{}`, written by `{producer_name}`{at}",
                stages[consumer].name, dep.path
            ));
        }
    }
    diagnostic
}
