//! Why a value cannot be put where it lands.

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refusal {
    /// Where the value lands: "inside an arithmetic expression ...".
    pub(crate) place: String,
    /// What about the value (or the place) makes it unsafe there.
    pub(crate) why: String,
}

pub(super) fn refuse(place: impl Into<String>, why: impl Into<String>) -> Refusal {
    Refusal {
        place: place.into(),
        why: why.into(),
    }
}

/// The value in a message: short ones whole, long ones by their start.
pub(super) fn describe(value: &str) -> String {
    const SHOWN: usize = 40;
    let count = value.chars().count();
    if count <= SHOWN {
        format!("`{}`", value.escape_debug())
    } else {
        let start: String = value.chars().take(SHOWN).collect();
        format!("`{}...` ({count} characters)", start.escape_debug())
    }
}
