//! Matrix values, stored once per matrix stage and shared by its
//! expansions: a sweep of a million combinations holds each value once,
//! and each expansion only the position of its value on every key.

use std::fmt;
use std::sync::Arc;

use serde_json::Value;

/// A matrix can multiply a small file into any number of stages; this
/// bounds the work and memory one pipeline file can ask for.
pub(crate) const MAX_STAGES: usize = 1_000_000;

#[derive(Debug, Clone)]
pub(crate) struct MatrixValue {
    pub json: Value,
    /// As written, for names and interpolation.
    pub text: String,
}

#[derive(Debug)]
pub(crate) struct MatrixAxis {
    pub key: String,
    pub values: Vec<MatrixValue>,
    /// Axes of one group take their n-th values together (the fields of
    /// a list of records, DVC's `foreach` over mappings, or the wildcards
    /// of a file pattern); the expansions are the cartesian product of the
    /// groups, in the order their first axes are declared.
    pub group: u16,
}

/// The matrix combination of one expansion, keys in declared order;
/// empty for a stage without a matrix.
#[derive(Clone, Default)]
pub struct StageMatrix {
    axes: Option<Arc<[MatrixAxis]>>,
    /// For each axis, the index of this expansion's value.
    positions: Box<[u32]>,
}

impl StageMatrix {
    pub(crate) fn new(axes: Arc<[MatrixAxis]>, positions: Box<[u32]>) -> StageMatrix {
        debug_assert_eq!(axes.len(), positions.len());
        StageMatrix {
            axes: Some(axes),
            positions,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.positions.is_empty()
    }

    pub fn len(&self) -> usize {
        self.positions.len()
    }

    /// This expansion's value of `key`.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.value(key).map(|value| &value.json)
    }

    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.entries().map(|(key, _)| key)
    }

    /// (key, value) in declared key order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.entries().map(|(key, value)| (key, &value.json))
    }

    /// The combination as the run record keeps it: each value as written.
    pub fn combination(&self) -> pipe_protocol::record::Combination {
        pipe_protocol::record::Combination(
            self.entries()
                .map(|(key, value)| (key.to_string(), value.text.clone()))
                .collect(),
        )
    }

    /// Every value the matrix declares for `key` (empty if it has none).
    pub(crate) fn values_of(&self, key: &str) -> &[MatrixValue] {
        self.axes
            .as_deref()
            .unwrap_or(&[])
            .iter()
            .find(|axis| axis.key == key)
            .map_or(&[], |axis| axis.values.as_slice())
    }

    pub(crate) fn value(&self, key: &str) -> Option<&MatrixValue> {
        self.entries()
            .find(|(name, _)| *name == key)
            .map(|(_, value)| value)
    }

    pub(crate) fn entries(&self) -> impl Iterator<Item = (&str, &MatrixValue)> {
        let axes: &[MatrixAxis] = self.axes.as_deref().unwrap_or(&[]);
        axes.iter()
            .zip(self.positions.iter())
            .map(|(axis, &position)| (axis.key.as_str(), &axis.values[position as usize]))
    }
}

impl fmt::Debug for StageMatrix {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.debug_map().entries(self.iter()).finish()
    }
}
