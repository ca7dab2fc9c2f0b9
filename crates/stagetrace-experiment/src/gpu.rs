//! GPU tracks through NVML (cargo feature `nvml`): utilisation, SM and
//! memory clocks, temperature, power and the current clocks-throttle reasons
//! of every GPU, once per resource sample.
//!
//! `libnvidia-ml.so` is loaded at run time, so building needs no GPU or CUDA.
//! A missing library, driver or device is one note in the report
//! ([`crate::sampler::Sampler::gpu_note`]), never an error. Without the feature the
//! note says so and nothing else changes.

use serde::Serialize;

/// One GPU at one sample. Figures NVML does not offer for the device are absent.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct GpuSample {
    /// NVML device index.
    pub index: u32,
    /// Share of the last sample period a kernel ran, percent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub util_gpu_pct: Option<f64>,
    /// Share of the last sample period device memory was read or written, percent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub util_mem_pct: Option<f64>,
    /// SM clock, MHz.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sm_clock_mhz: Option<u32>,
    /// Memory clock, MHz.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mem_clock_mhz: Option<u32>,
    /// GPU die temperature, °C.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temp_c: Option<u32>,
    /// Power draw, W.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub power_w: Option<f64>,
    /// Current clocks-throttle reasons, by name ([`throttle_names`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub throttle: Vec<&'static str>,
}

/// NVML's clocks-throttle reason bits (`nvmlClocksThrottleReason*`) and their names.
pub const THROTTLE_REASONS: [(u64, &str); 9] = [
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
];

/// The names of the reasons set in `bits`, in bit order; a bit NVML may add
/// later is named `"unknown"` (once).
pub fn throttle_names(bits: u64) -> Vec<&'static str> {
    let mut names: Vec<&'static str> = THROTTLE_REASONS
        .iter()
        .filter(|(b, _)| bits & b != 0)
        .map(|(_, n)| *n)
        .collect();
    let known = THROTTLE_REASONS.iter().fold(0, |m, (b, _)| m | b);
    if bits & !known != 0 {
        names.push("unknown");
    }
    names
}

/// Whether a reason holds the clocks below what the work asks for (power,
/// thermal, hardware slowdown, sync boost) — not idling or a clock setting.
pub fn is_limiting(reason: &str) -> bool {
    !matches!(
        reason,
        "gpu_idle" | "applications_clocks_setting" | "display_clock_setting"
    )
}

/// An open NVML handle with at least one device.
#[cfg(feature = "nvml")]
pub(crate) struct GpuSource {
    nvml: nvml_wrapper::Nvml,
    count: u32,
}

/// Never constructed: built without the `nvml` feature.
#[cfg(not(feature = "nvml"))]
#[derive(Debug)]
pub(crate) enum GpuSource {}

#[cfg(feature = "nvml")]
impl std::fmt::Debug for GpuSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "GpuSource({} devices)", self.count)
    }
}

/// Open NVML once: the source (if any GPU can be sampled) and the report's note.
#[cfg(not(feature = "nvml"))]
pub(crate) fn open() -> (Option<GpuSource>, String) {
    (
        None,
        "GPU: not sampled (built without the nvml feature)".to_owned(),
    )
}

#[cfg(feature = "nvml")]
fn unavailable(why: &str) -> String {
    format!("GPU: NVML not available ({why}) — GPU tracks skipped")
}

/// Open NVML once: the source (if any GPU can be sampled) and the report's note.
#[cfg(feature = "nvml")]
pub(crate) fn open() -> (Option<GpuSource>, String) {
    use nvml_wrapper::error::NvmlError;
    let nvml = match nvml_wrapper::Nvml::init() {
        Ok(n) => n,
        Err(e) => {
            let why = match e {
                NvmlError::LibloadingError(_) | NvmlError::FailedToLoadSymbol(_) => {
                    "libnvidia-ml.so not found".to_owned()
                }
                NvmlError::DriverNotLoaded => "the NVIDIA driver is not loaded".to_owned(),
                NvmlError::NoPermission => "no permission to talk to the driver".to_owned(),
                other => other.to_string(),
            };
            return (None, unavailable(&why));
        }
    };
    let count = match nvml.device_count() {
        Ok(c) => c,
        Err(e) => return (None, unavailable(&format!("counting devices: {e}"))),
    };
    if count == 0 {
        return (
            None,
            "GPU: NVML found no GPU — GPU tracks skipped".to_owned(),
        );
    }
    let driver = nvml
        .sys_driver_version()
        .unwrap_or_else(|_| "unknown".into());
    let names: Vec<String> = (0..count)
        .map(|i| {
            nvml.device_by_index(i)
                .and_then(|d| d.name())
                .unwrap_or_else(|_| format!("GPU {i}"))
        })
        .collect();
    let note = format!(
        "GPU: {count} device(s) sampled through NVML (driver {driver}): {}",
        names.join(", ")
    );
    (Some(GpuSource { nvml, count }), note)
}

impl GpuSource {
    /// One sample of every device; a device or figure that fails is left out.
    pub(crate) fn sample(&self) -> Vec<GpuSample> {
        #[cfg(feature = "nvml")]
        {
            use nvml_wrapper::enum_wrappers::device::{Clock, TemperatureSensor};
            (0..self.count)
                .filter_map(|i| {
                    let d = self.nvml.device_by_index(i).ok()?;
                    let util = d.utilization_rates().ok();
                    Some(GpuSample {
                        index: i,
                        util_gpu_pct: util.as_ref().map(|u| f64::from(u.gpu)),
                        util_mem_pct: util.as_ref().map(|u| f64::from(u.memory)),
                        sm_clock_mhz: d.clock_info(Clock::SM).ok(),
                        mem_clock_mhz: d.clock_info(Clock::Memory).ok(),
                        temp_c: d.temperature(TemperatureSensor::Gpu).ok(),
                        power_w: d.power_usage().ok().map(|mw| f64::from(mw) / 1e3),
                        throttle: d
                            .current_throttle_reasons()
                            .map(|r| throttle_names(r.bits()))
                            .unwrap_or_default(),
                    })
                })
                .collect()
        }
        #[cfg(not(feature = "nvml"))]
        match *self {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn throttle_reasons_are_named_in_bit_order() {
        assert!(throttle_names(0).is_empty());
        assert_eq!(throttle_names(0x1), ["gpu_idle"]);
        assert_eq!(
            throttle_names(0x4 | 0x40 | 0x1),
            ["gpu_idle", "sw_power_cap", "hw_thermal_slowdown"]
        );
        assert_eq!(throttle_names(0x200 | 0x8), ["hw_slowdown", "unknown"]);
        assert!(is_limiting("sw_power_cap") && is_limiting("hw_thermal_slowdown"));
        assert!(!is_limiting("gpu_idle") && !is_limiting("applications_clocks_setting"));
    }

    #[cfg(feature = "nvml")]
    #[test]
    fn names_match_the_nvml_bits() {
        use nvml_wrapper::bitmasks::device::ThrottleReasons as R;
        let pairs = [
            (R::GPU_IDLE, "gpu_idle"),
            (
                R::APPLICATIONS_CLOCKS_SETTING,
                "applications_clocks_setting",
            ),
            (R::SW_POWER_CAP, "sw_power_cap"),
            (R::HW_SLOWDOWN, "hw_slowdown"),
            (R::SYNC_BOOST, "sync_boost"),
            (R::SW_THERMAL_SLOWDOWN, "sw_thermal_slowdown"),
            (R::HW_THERMAL_SLOWDOWN, "hw_thermal_slowdown"),
            (R::HW_POWER_BRAKE_SLOWDOWN, "hw_power_brake_slowdown"),
            (R::DISPLAY_CLOCK_SETTING, "display_clock_setting"),
        ];
        for (r, n) in pairs {
            assert_eq!(throttle_names(r.bits()), [n]);
        }
    }
}
