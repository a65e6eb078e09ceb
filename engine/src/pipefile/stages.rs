//! The stages of a pipeline file, phase by phase: declarations
//! (`declare`) -> the catalog -> matrix expansions (`expand`) -> resolved
//! paths, references and `with:` (`resolve`, `worker_stage`) -> output
//! ownership and implicit edges (`ownership`).

use std::sync::Arc;

use super::context::Context;
use super::declare::{declare, DeclKind};
use super::expand::expand;
use super::ownership::{check_output_ownership, follow_symlinks};
use super::resolve::{Effects, Resolver};
use super::worker_stage::unknown_worker_stage;
use crate::catalog::CatalogEntry;
use crate::pipeline::matrix::MatrixAxis;
use crate::pipeline::{Out, Stage};
use crate::project_files::collect::Diagnostics;
use crate::project_files::yaml::Node;
use crate::{Diagnostic, Result};

pub(crate) fn build(
    cx: &Context,
    stages_node: &Node,
    diagnostics: &mut Diagnostics,
) -> Result<Vec<Stage>> {
    let (sources, params, root) = (cx.sources, cx.params, cx.root);
    let Some(entries) = stages_node.as_map() else {
        diagnostics.push(
            Diagnostic::new("bad-type", format!("`stages` must be a mapping of stage names, found {}", stages_node.describe()))
                .at(sources.location(stages_node.span))
                .with_hint("write `stages:` followed by indented stage names, e.g.\nstages:\n  train:\n    run: python train.py"),
        );
        return Ok(Vec::new());
    };
    if entries.is_empty() {
        diagnostics.push(
            Diagnostic::new("no-stages", "`stages` is empty")
                .at(sources.location(stages_node.span))
                .with_hint(
                    "add at least one stage, e.g.\nstages:\n  train:\n    run: python train.py",
                ),
        );
        return Ok(Vec::new());
    }

    let mut decls = Vec::new();
    let mut axes_per_decl = Vec::new();
    for entry in entries {
        if let Some((decl, axes)) = declare(entry, root, sources, params, diagnostics) {
            decls.push(decl);
            axes_per_decl.push(Arc::<[MatrixAxis]>::from(axes));
        }
    }

    // The catalog is asked for only when the declarations are sound: in a
    // source checkout it may build the workers first, which takes minutes
    // that a typo should not cost.
    let uses: Vec<(&str, u32)> = decls
        .iter()
        .filter_map(|decl| match &decl.kind {
            DeclKind::Worker { uses, version, .. } => Some((uses.as_str(), *version)),
            _ => None,
        })
        .collect();
    let catalog = if !uses.is_empty() && diagnostics.is_empty() {
        Some(cx.catalogs.catalog(root, &uses)?)
    } else {
        None
    };
    let catalog_entries: Vec<Option<&CatalogEntry>> = decls
        .iter()
        .map(|decl| {
            let catalog = catalog.as_ref()?;
            let DeclKind::Worker {
                uses,
                version,
                uses_span,
            } = &decl.kind
            else {
                return None;
            };
            let entry = catalog.get(uses, *version);
            if entry.is_none() {
                diagnostics.push(unknown_worker_stage(
                    catalog,
                    uses,
                    *version,
                    decl.name,
                    sources.location(*uses_span),
                ));
            }
            entry
        })
        .collect();

    let expansions = expand(&decls, &axes_per_decl, sources, diagnostics);
    if expansions.is_empty() {
        return Ok(Vec::new());
    }
    let mut resolver = Resolver::new(cx, &decls, &catalog_entries, &expansions);

    // Outputs first: references between stages need every stage's outputs.
    let mut outs_per_stage: Vec<Vec<Out>> = Vec::with_capacity(expansions.len());
    let mut metrics_per_stage = Vec::with_capacity(expansions.len());
    let mut plots_per_stage = Vec::with_capacity(expansions.len());
    let mut effects_per_stage = Vec::with_capacity(expansions.len());
    for expansion in &expansions {
        let decl = &decls[expansion.decl];
        let mut effects = Effects::default();
        let mut outs = resolver.outputs(decl, expansion, "outs", &mut effects, diagnostics);
        let metrics = resolver.outputs(decl, expansion, "metrics", &mut effects, diagnostics);
        // A plot's file is an output: known, like the others, before any
        // stage is built, so that references and edges see it.
        let plots = resolver.plots(
            decl,
            expansion,
            &mut outs,
            &metrics,
            &mut effects,
            diagnostics,
        );
        outs_per_stage.push(outs);
        metrics_per_stage.push(metrics);
        plots_per_stage.push(plots);
        effects_per_stage.push(effects);
    }
    // The only copy of each stage's outs until its `Stage` is built: a
    // million-stage sweep must not hold them twice.
    resolver.outputs_by_stage = outs_per_stage;

    let mut stages = Vec::with_capacity(expansions.len());
    for (index, expansion) in expansions.iter().enumerate() {
        let metrics = std::mem::take(&mut metrics_per_stage[index]);
        let effects = std::mem::take(&mut effects_per_stage[index]);
        stages.push(resolver.stage(
            &decls[expansion.decl],
            expansion,
            index,
            metrics,
            effects,
            diagnostics,
        ));
    }
    let built = resolver.outputs_by_stage.drain(..).zip(plots_per_stage);
    for (stage, (outs, plots)) in stages.iter_mut().zip(built) {
        stage.outs = outs;
        stage.plots = plots;
    }

    // What built the stages is not needed to check them; in a large sweep
    // it is a good part of the peak.
    drop(resolver);
    drop(expansions);
    drop((metrics_per_stage, effects_per_stage));
    let moved = follow_symlinks(root, &stages, diagnostics);
    check_output_ownership(&mut stages, &moved, diagnostics);
    Ok(stages)
}
