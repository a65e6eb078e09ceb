//! A `-S` setting as data: the param's path as its keys, what the setting
//! may do to it (replace, add, set), and its value as YAML data, parsed
//! once where the command line is read and recorded as such. A leaf below
//! the loader, the runs and the sweep, which all carry it.

mod parse;
mod sweep_forms;
mod value;

pub use parse::override_value;
pub use sweep_forms::MAX_COMBINATIONS;
pub(crate) use value::plain_json;
pub use value::{OverrideMode, OverrideValue, ParamOverride, ParamPath, ParamValue};
