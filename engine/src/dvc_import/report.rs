//! What the conversion could not carry, or carried otherwise than DVC
//! ran it, each at its place in `dvc.yaml`, so that nothing is dropped
//! without a word.

use crate::project_files::source::{Sources, Span};
use crate::Location;

/// How far a piece of `dvc.yaml` made it into `pipe.yaml`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FindingKind {
    /// Left out: pipe has no such thing, or it cannot be written here.
    NotCarried,
    /// Carried, but written otherwise than DVC wrote it (a value put in
    /// as it is today, a stage renamed): the pipeline does what DVC did.
    Changed,
}

/// One thing said about the conversion.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub kind: FindingKind,
    /// Where it is in `dvc.yaml` (or a file it names).
    pub location: Option<Location>,
    /// What it is: ``frozen: true` of stage `train``.
    pub what: String,
    /// Why, and what to do about it.
    pub why: String,
}

/// The findings of one conversion, in the order they were met, located
/// once every file is read.
#[derive(Default)]
pub(crate) struct Findings {
    list: Vec<(FindingKind, Span, String, String)>,
}

impl Findings {
    pub(crate) fn not_carried(
        &mut self,
        span: Span,
        what: impl Into<String>,
        why: impl Into<String>,
    ) {
        self.push(FindingKind::NotCarried, span, what.into(), why.into());
    }

    pub(crate) fn changed(&mut self, span: Span, what: impl Into<String>, why: impl Into<String>) {
        self.push(FindingKind::Changed, span, what.into(), why.into());
    }

    fn push(&mut self, kind: FindingKind, span: Span, what: String, why: String) {
        let finding = (kind, span, what, why);
        // A stage expanded by `foreach` meets the same template once per
        // item: said once.
        if !self.list.contains(&finding) {
            self.list.push(finding);
        }
    }

    /// The not-carried findings of `span`'s line range, for a comment in
    /// pipe.yaml: `(what, why)`.
    pub(crate) fn since(&self, start: usize) -> Vec<(FindingKind, String, String)> {
        self.list[start.min(self.list.len())..]
            .iter()
            .map(|(kind, _, what, why)| (*kind, what.clone(), why.clone()))
            .collect()
    }

    pub(crate) fn len(&self) -> usize {
        self.list.len()
    }

    pub(crate) fn finish(self, sources: &Sources) -> Vec<Finding> {
        self.list
            .into_iter()
            .map(|(kind, span, what, why)| Finding {
                kind,
                location: sources.location(span),
                what,
                why,
            })
            .collect()
    }
}
