//! The plan file: the target, a baseline phase, one factor with its levels.
//!
//! TOML, documented with examples in `docs/experiments.md`:
//!
//! ```toml
//! name = "network delay ramp"
//!
//! [target]            # the built-in demo pipeline
//! kind = "demo"
//! hz = 30
//! model_ms = 12
//!
//! [baseline]
//! hold_s = 4
//!
//! [factor]
//! kind = "net"        # net | payload | infer | cpu | pause
//! direction = "both"  # uplink | downlink | both (net only)
//! hold_s = 4
//! levels = [5, 20]    # shorthand for { delay_ms = 5 }, { delay_ms = 20 }
//! ```

mod error;
mod factor;
mod lerobot;
mod target;
mod validate;

use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use error::PlanError;
pub use factor::{Direction, Factor, FactorKind, Hold, Level, LevelInput};
pub use target::{DemoTransport, Target, TargetKind, DEFAULT_CHUNK_SIZE, DEFAULT_REFILL_THRESHOLD};

/// A whole experiment plan.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Plan {
    /// A name for the report (default: the factor's kind).
    #[serde(default)]
    pub name: Option<String>,
    /// What is measured.
    pub target: Target,
    /// The idle phase every level is compared with.
    pub baseline: Hold,
    /// The one factor that is raised in steps.
    pub factor: Factor,
    /// Resource sampling.
    #[serde(default)]
    pub sampler: SamplerSpec,
    /// Thresholds of the verdict.
    #[serde(default)]
    pub verdict: VerdictSpec,
}

/// Resource sampling settings.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SamplerSpec {
    /// Samples per second (default 10).
    #[serde(default = "d_sampler_hz")]
    pub hz: f64,
}

fn d_sampler_hz() -> f64 {
    10.0
}

impl Default for SamplerSpec {
    fn default() -> Self {
        SamplerSpec { hz: d_sampler_hz() }
    }
}

/// Thresholds below which a change is not called a move.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VerdictSpec {
    /// Smallest p50 shift that counts, ms (default: max(0.5 ms, 5 % of the baseline e2e p50)).
    #[serde(default)]
    pub min_p50_ms: Option<f64>,
    /// Smallest p99 shift that counts, ms (default: max(2 ms, 10 % of the baseline e2e p50)).
    #[serde(default)]
    pub min_p99_ms: Option<f64>,
}

impl Plan {
    /// Read and validate a plan file.
    pub fn from_file(path: &Path) -> Result<Plan, PlanError> {
        let text =
            std::fs::read_to_string(path).map_err(|e| PlanError::Read(path.to_path_buf(), e))?;
        Plan::from_toml(&text)
    }

    /// Parse and validate a plan from TOML text.
    pub fn from_toml(text: &str) -> Result<Plan, PlanError> {
        let plan: Plan = toml::from_str(text).map_err(|e| PlanError::Parse(e.to_string()))?;
        plan.validate()?;
        Ok(plan)
    }

    /// The plan's name for reports.
    pub fn title(&self) -> String {
        self.name
            .clone()
            .unwrap_or_else(|| format!("{} ramp", self.factor.kind.name()))
    }

    /// The levels with bare numbers expanded to their factor's primary knob.
    pub fn levels(&self) -> Vec<Level> {
        let kind = self.factor.kind;
        self.factor
            .levels
            .iter()
            .map(|l| match l {
                LevelInput::Table(t) => t.clone(),
                LevelInput::Number(v) => {
                    let v = *v;
                    let mut t = Level::default();
                    match kind {
                        FactorKind::Net => t.delay_ms = Some(v),
                        FactorKind::Infer => t.in_flight = Some(v.max(0.0) as u32),
                        FactorKind::Cpu => t.threads = Some(v.max(0.0) as u32),
                        FactorKind::Payload => t.payload_kb = Some(v.max(0.0) as u64),
                        FactorKind::Pause => t.pause_ms = Some(v),
                    }
                    t
                }
            })
            .collect()
    }

    /// Nominal run time: warm-up, baseline, every level.
    pub fn nominal_duration(&self) -> Duration {
        let hz = self.target.call_hz();
        let levels = self.factor.levels.len() as u32;
        Duration::from_secs_f64(self.target.warmup_s.max(0.0))
            + self.baseline.duration(hz)
            + self.factor.hold().duration(hz) * levels
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn shorthand_levels_expand_to_the_primary_knob() {
        let p = Plan::from_toml(
            "[target]\nkind = \"demo\"\n[baseline]\nhold_s = 2\n[factor]\nkind = \"net\"\nhold_s = 2\nlevels = [5, { delay_ms = 10, jitter_ms = 2 }]\n",
        )
        .unwrap();
        let l = p.levels();
        assert_eq!(l[0].delay_ms, Some(5.0));
        assert_eq!(l[1].jitter_ms, Some(2.0));
        assert_eq!(p.target.hz, 30.0);
    }

    #[test]
    fn misplaced_fields_are_named() {
        let e = Plan::from_toml(
            "[target]\nkind = \"demo\"\n[baseline]\nhold_s = 2\n[factor]\nkind = \"infer\"\nhold_s = 2\nlevels = [{ delay_ms = 5 }]\n",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("delay_ms does not apply to a infer factor"),
            "{e}"
        );
        let e = Plan::from_toml("[target]\nkind = \"demo\"\n[baseline]\n[factor]\nkind = \"net\"\nhold_s = 1\nlevels = [1]\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("baseline: give hold_s"), "{e}");
        let e = Plan::from_toml(
            "[target]\nkind = \"demo\"\n[baseline]\nhold_s = 2\n[factor]\nkind = \"net\"\nhold_s = 2\nlevels = [{ rate_mbit = 10 }]\n",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("set factor.kernel = true"), "{e}");
        let e = Plan::from_toml(
            "[target]\nkind = \"demo\"\n[baseline]\nhold_s = 2\n[factor]\nkind = \"cpu\"\nkernel = true\nhold_s = 2\nlevels = [1]\n",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("factor.kernel applies to net only"), "{e}");
        let p = Plan::from_toml(
            "[target]\nkind = \"demo\"\n[baseline]\nhold_s = 2\n[factor]\nkind = \"net\"\nkernel = true\nhold_s = 2\nlevels = [{ rate_mbit = 10, cross_mbit = 4, queue_ms = 50 }]\n",
        )
        .unwrap();
        assert_eq!(p.levels()[0].rate_mbit, Some(10.0));
        let e = Plan::from_toml("[target]\nkind = \"demo\"\nhzz = 3\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("hzz"), "{e}");
    }
}
