//! Why a plan was rejected.

use std::fmt;

/// Why a plan was rejected.
#[derive(Debug)]
pub enum PlanError {
    /// The file could not be read.
    Read(std::path::PathBuf, std::io::Error),
    /// The TOML did not parse or has unknown / mistyped fields.
    Parse(String),
    /// A value is out of range or does not apply to the factor.
    Invalid(String),
}

impl fmt::Display for PlanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PlanError::Read(p, e) => write!(
                f,
                "cannot read the plan {} ({e}); pass the path of a TOML plan (see docs/experiments.md)",
                p.display()
            ),
            PlanError::Parse(e) => write!(
                f,
                "the plan is not valid TOML for an experiment: {e} (see docs/experiments.md for the fields)"
            ),
            PlanError::Invalid(e) => write!(f, "invalid plan: {e}"),
        }
    }
}

impl std::error::Error for PlanError {}

pub(crate) fn invalid(msg: impl Into<String>) -> PlanError {
    PlanError::Invalid(msg.into())
}
