//! How a built-in stage describes itself: [`StageInfoBuilder`] says once
//! what every stage's `info()` would otherwise spell out in full (the
//! `.into()`s, the fields a data stage leaves empty), so that an `info()`
//! reads as the stage's name, params, outputs and metrics only.

use pipe_protocol::record::StageRoles;
use pipe_protocol::{OutputKind, OutputSpec, ParamRule, ParamSpec, StageInfo};

/// A [`StageInfo`] being put together; [`StageInfoBuilder::build`] hands
/// it over. Implementation 1, no param, output or metric, no role until
/// told otherwise.
#[must_use]
pub struct StageInfoBuilder {
    info: StageInfo,
}

impl StageInfoBuilder {
    /// `name@version`, e.g. `data/split` and 1, with its one-line summary.
    pub fn new(name: &str, version: u32, summary: &str) -> StageInfoBuilder {
        StageInfoBuilder {
            info: StageInfo {
                name: name.into(),
                version,
                implementation: 1,
                summary: summary.into(),
                params: Vec::new(),
                outputs: Vec::new(),
                metrics: Vec::new(),
                devices_param: None,
                nodes_param: None,
                reads_run: false,
                roles: StageRoles::default(),
                rules: Vec::new(),
            },
        }
    }

    /// Bumped whenever the stage's results would change for the same
    /// inputs (part of the stage key).
    pub fn implementation(mut self, implementation: u32) -> Self {
        self.info.implementation = implementation;
        self
    }

    /// The params, in the order `pipe stages` lists them.
    pub fn params(mut self, params: impl IntoIterator<Item = ParamSpec>) -> Self {
        self.info.params.extend(params);
        self
    }

    pub fn output(mut self, name: &str, kind: OutputKind, doc: &str) -> Self {
        self.info.outputs.push(OutputSpec {
            name: name.into(),
            kind,
            doc: doc.into(),
            page: None,
        });
        self
    }

    /// The file of the output just added that a person opens
    /// (`OutputSpec::page`).
    pub fn page(mut self, file: &str) -> Self {
        if let Some(output) = self.info.outputs.last_mut() {
            output.page = Some(file.into());
        }
        self
    }

    /// Every key of the stage's `metrics.json` (see `StageInfo::metrics`).
    pub fn metrics<Name: Into<String>>(mut self, names: impl IntoIterator<Item = Name>) -> Self {
        self.info.metrics.extend(names.into_iter().map(Into::into));
        self
    }

    /// A rule between params the engine checks at load (`ParamRule`).
    pub fn rule(self, rule: ParamRule) -> Self {
        self.rules([rule])
    }

    pub fn rules(mut self, rules: impl IntoIterator<Item = ParamRule>) -> Self {
        self.info.rules.extend(rules);
        self
    }

    /// The stage makes data that other stages train or evaluate on.
    pub fn makes_data(mut self) -> Self {
        self.info.roles.makes_data = true;
        self
    }

    /// The param that seeds the stage's randomness.
    pub fn seed_param(mut self, name: &str) -> Self {
        self.info.roles.seed = Some(name.into());
        self
    }

    /// The param that picks the numeric precision.
    pub fn precision_param(mut self, name: &str) -> Self {
        self.info.roles.precision = Some(name.into());
        self
    }

    /// The integer params that say on how many devices per node and on
    /// how many nodes the stage's replicas run.
    pub fn replicas_params(mut self, devices: &str, nodes: &str) -> Self {
        self.info.devices_param = Some(devices.into());
        self.info.nodes_param = Some(nodes.into());
        self
    }

    /// Metrics (names or dotted prefixes) that are detail, not results.
    pub fn detail_metrics(mut self, prefixes: &[&str]) -> Self {
        self.info
            .roles
            .detail_metrics
            .extend(prefixes.iter().map(|prefix| prefix.to_string()));
        self
    }

    /// The metrics a person decides on, by exact name: comparisons lead
    /// with them.
    pub fn key_metrics(mut self, names: &[&str]) -> Self {
        self.info
            .roles
            .key_metrics
            .extend(names.iter().map(|name| name.to_string()));
        self
    }

    /// Metrics (names or dotted prefixes) that describe the machine.
    pub fn hardware_metrics(mut self, prefixes: &[&str]) -> Self {
        self.info
            .roles
            .hardware_metrics
            .extend(prefixes.iter().map(|prefix| prefix.to_string()));
        self
    }

    /// The stage reports on the run it is part of.
    pub fn reads_run(mut self) -> Self {
        self.info.reads_run = true;
        self
    }

    pub fn build(self) -> StageInfo {
        self.info
    }
}
