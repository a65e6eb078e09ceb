//! A plot a stage declares of one of its own files (`plots:` in the
//! pipeline file): which file, which columns, drawn how. The loader makes
//! it, the run record keeps it with the stage (so a pulled or old run can
//! be drawn as it was declared), the report stage draws it from the
//! file's content and `pipe compare --html` overlays it across runs. Here
//! because all three must read the same spec the same way.

use std::fmt;

use serde::{Deserialize, Serialize};

/// How a plot is drawn.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PlotKind {
    /// y against x, joined (a curve: ROC, loss per step).
    #[default]
    Line,
    /// The points alone.
    Scatter,
    /// y held until the next x (a staircase).
    Step,
    /// A bar per row, its x as the category.
    Bar,
    /// A confusion matrix: counts of (x = actual, y = predicted) label
    /// pairs, one row per sample.
    Confusion,
    /// The same, each actual label's row divided by its count.
    ConfusionNormalized,
}

impl PlotKind {
    pub const ALL: [PlotKind; 6] = [
        PlotKind::Line,
        PlotKind::Scatter,
        PlotKind::Step,
        PlotKind::Bar,
        PlotKind::Confusion,
        PlotKind::ConfusionNormalized,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            PlotKind::Line => "line",
            PlotKind::Scatter => "scatter",
            PlotKind::Step => "step",
            PlotKind::Bar => "bar",
            PlotKind::Confusion => "confusion",
            PlotKind::ConfusionNormalized => "confusion_normalized",
        }
    }

    pub fn parse(text: &str) -> Option<PlotKind> {
        PlotKind::ALL.into_iter().find(|kind| kind.as_str() == text)
    }

    /// The kind a DVC `template:` means, where pipe draws one like it
    /// (`linear`, `simple` and `smooth` are all a line: pipe draws the
    /// data as it is, unsmoothed).
    pub fn of_dvc_template(template: &str) -> Option<PlotKind> {
        Some(match template {
            "linear" | "simple" | "smooth" => PlotKind::Line,
            "scatter" | "scatter_jitter" => PlotKind::Scatter,
            "confusion" => PlotKind::Confusion,
            "confusion_normalized" => PlotKind::ConfusionNormalized,
            "bar_horizontal" | "bar_horizontal_sorted" => PlotKind::Bar,
            _ => return None,
        })
    }

    /// The DVC templates [`PlotKind::of_dvc_template`] reads.
    pub const DVC_TEMPLATES: [&'static str; 9] = [
        "linear",
        "simple",
        "smooth",
        "scatter",
        "scatter_jitter",
        "confusion",
        "confusion_normalized",
        "bar_horizontal",
        "bar_horizontal_sorted",
    ];

    /// A confusion matrix: x and y are labels, not numbers.
    pub fn is_confusion(self) -> bool {
        matches!(self, PlotKind::Confusion | PlotKind::ConfusionNormalized)
    }
}

impl fmt::Display for PlotKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

/// One declared plot. Unset columns are chosen when the data is read
/// ([`PlotSpec::x`]), so that a spec written as a bare path draws
/// whatever the file holds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PlotSpec {
    /// The file, project-relative (`eval/plots/roc.csv`): an output of
    /// its stage, or a file inside one.
    pub path: String,
    #[serde(default)]
    pub kind: PlotKind,
    /// The x column; unset: `step`, else `epoch`, else the first column.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub x: Option<String>,
    /// The y columns; empty: every other numeric column (for a confusion
    /// matrix, the second column).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub y: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub x_label: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub y_label: Option<String>,
}

impl PlotSpec {
    pub fn new(path: impl Into<String>) -> PlotSpec {
        PlotSpec {
            path: path.into(),
            ..PlotSpec::default()
        }
    }

    /// `kind x=fpr y=tpr`, as `pipe show` lists a plot after its path;
    /// unset columns read `x=auto`, `y=auto`.
    pub fn summary(&self) -> String {
        let y = if self.y.is_empty() {
            "auto".to_string()
        } else {
            self.y.join(",")
        };
        format!(
            "{} x={} y={y}",
            self.kind,
            self.x.as_deref().unwrap_or("auto")
        )
    }
}

/// A plot of a stage a reader of the run is told of: its spec, and where
/// its file lies now (absolute).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunPlot {
    #[serde(flatten)]
    pub spec: PlotSpec,
    pub file: std::path::PathBuf,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bare_spec_is_a_line_and_round_trips_without_unset_fields() {
        let spec = PlotSpec::new("eval/roc.csv");
        let json = serde_json::to_value(&spec).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"path": "eval/roc.csv", "kind": "line"})
        );
        let back: PlotSpec = serde_json::from_value(json).unwrap();
        assert_eq!(back, spec);
        assert_eq!(spec.summary(), "line x=auto y=auto");
    }

    #[test]
    fn every_kind_reads_back_from_its_name_and_dvc_templates_map_onto_kinds() {
        for kind in PlotKind::ALL {
            assert_eq!(PlotKind::parse(kind.as_str()), Some(kind));
        }
        for template in PlotKind::DVC_TEMPLATES {
            assert!(PlotKind::of_dvc_template(template).is_some(), "{template}");
        }
        assert_eq!(PlotKind::of_dvc_template("smooth"), Some(PlotKind::Line));
        assert_eq!(
            PlotKind::of_dvc_template("bar_horizontal"),
            Some(PlotKind::Bar)
        );
        assert_eq!(PlotKind::of_dvc_template("area"), None);
    }
}
