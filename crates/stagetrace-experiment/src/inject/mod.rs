//! The injectors: each applies one factor's level to the running target and
//! restores what it changed — on success, on a failure, and on Ctrl-C (the
//! runner calls [`Injector::restore`] on every path, and `Drop` does too).

mod burners;
mod infer;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use stagetrace_net::proxy::{Jitter, LinkConfig, Stall};

use crate::error::ExperimentError;
use crate::pipeline::{mbps_to_bytes, Pipeline};
use crate::plan::{Direction, FactorKind, Level};

use burners::Burners;
use infer::{InferLoad, Replay};

/// Applies a factor's levels to the pipeline and restores the target.
#[derive(Debug)]
pub(crate) struct Injector {
    kind: FactorKind,
    direction: Direction,
    infer: Option<InferLoad>,
    burners: Option<Burners>,
    /// Replayed requests completed / failed, over all levels.
    pub(crate) replayed: (u64, u64),
    /// Burner threads pinned as asked.
    pub(crate) pinned: u64,
    /// Cross-traffic bytes sent through the kernel bottleneck (`net`, `kernel = true`).
    pub(crate) cross_bytes: Option<u64>,
    /// What restore undid, for the report.
    pub(crate) restored: Vec<String>,
}

impl Injector {
    pub(crate) fn new(kind: FactorKind, direction: Direction) -> Injector {
        Injector {
            kind,
            direction,
            infer: None,
            burners: None,
            replayed: (0, 0),
            pinned: 0,
            cross_bytes: None,
            restored: Vec::new(),
        }
    }

    /// Set the target to `level` (replacing the previous level).
    pub(crate) fn apply(&mut self, p: &Pipeline, level: &Level) -> Result<(), ExperimentError> {
        match self.kind {
            FactorKind::Net => self.shape_network(p, level),
            FactorKind::Payload => match level.payload_kb {
                Some(kb) => p.set_payload(kb),
                None => Ok(()),
            },
            FactorKind::Pause => {
                set_pause(p, level);
                Ok(())
            }
            FactorKind::Infer => self.load_inference(p, level),
            FactorKind::Cpu => self.burn_cpu(level),
        }
    }

    /// A net level: the proxy's links in the factor's direction(s) shaped
    /// from the target's standing shaping, and the kernel bottleneck set.
    fn shape_network(&mut self, p: &Pipeline, level: &Level) -> Result<(), ExperimentError> {
        let Some(proxy) = p.proxy.as_ref() else {
            return Err(ExperimentError::Start("the proxy is not running".into()));
        };
        if self.direction != Direction::Downlink {
            proxy.set_uplink(shaped_link(p.base_uplink, level));
        }
        if self.direction != Direction::Uplink {
            proxy.set_downlink(shaped_link(p.base_downlink, level));
        }
        if let Some(k) = &p.kernel {
            let mut k = k.lock().unwrap_or_else(|e| e.into_inner());
            self.cross_bytes = Some(k.cross_bytes.load(Ordering::Relaxed));
            k.set(
                self.direction,
                level.rate_mbit,
                level.queue_ms,
                level.cross_mbit,
            )?;
        }
        Ok(())
    }

    /// An infer level: the previous load stopped, then `in_flight` replays
    /// of a captured request (HTTP) or observation (the robot's last).
    fn load_inference(&mut self, p: &Pipeline, level: &Level) -> Result<(), ExperimentError> {
        self.stop_infer();
        let n = level.in_flight.unwrap_or(1);
        let what = match &p.http_replay {
            Some(req) => Replay::Http(Arc::clone(req)),
            None => Replay::Ws(p.server_addr, Arc::new(captured_observation(p)?)),
        };
        self.infer = Some(InferLoad::start(what, n)?);
        Ok(())
    }

    /// A cpu level: the previous burners stopped, the level's started.
    fn burn_cpu(&mut self, level: &Level) -> Result<(), ExperimentError> {
        self.stop_burners();
        let b = Burners::start(
            level.threads.unwrap_or(1),
            level.duty.unwrap_or(1.0),
            level.cores.clone(),
        )?;
        self.burners = Some(b);
        Ok(())
    }

    fn stop_infer(&mut self) {
        if let Some(mut l) = self.infer.take() {
            let (d, f) = l.stop();
            self.replayed.0 += d;
            self.replayed.1 += f;
        }
    }

    fn stop_burners(&mut self) {
        if let Some(mut b) = self.burners.take() {
            b.stop();
            self.pinned += b.pinned.load(Ordering::Relaxed);
        }
    }

    /// Undo every change: standing shaping, payload, pause, load
    /// threads. Idempotent.
    pub(crate) fn restore(&mut self, p: Option<&Pipeline>) {
        if self.infer.is_some() {
            self.stop_infer();
            self.restored.push("inference load stopped".into());
        }
        if self.burners.is_some() {
            self.stop_burners();
            self.restored.push("CPU burners stopped".into());
        }
        let Some(p) = p else { return };
        match self.kind {
            FactorKind::Net => {
                if let Some(proxy) = p.proxy.as_ref() {
                    proxy.set_uplink(p.base_uplink);
                    proxy.set_downlink(p.base_downlink);
                    self.restored.push("proxy shaping reset".into());
                }
                if let Some(k) = &p.kernel {
                    let mut k = k.lock().unwrap_or_else(|e| e.into_inner());
                    self.restored.extend(k.clear());
                    self.cross_bytes = Some(k.cross_bytes.load(Ordering::Relaxed));
                }
            }
            FactorKind::Payload => {
                p.knobs
                    .payload_kb
                    .store(p.base_payload_kb, Ordering::Relaxed);
                self.restored.push("payload reset".into());
            }
            FactorKind::Pause => {
                p.knobs.pause_us.store(0, Ordering::Relaxed);
                self.restored.push("client pause off".into());
            }
            FactorKind::Infer | FactorKind::Cpu => {}
        }
    }
}

impl Drop for Injector {
    fn drop(&mut self) {
        self.restore(None);
    }
}

/// `base` with a net level's delay added and its jitter, bandwidth and
/// stalls set (what the level leaves out stays as in `base`).
fn shaped_link(base: LinkConfig, level: &Level) -> LinkConfig {
    let mut l = base;
    if let Some(d) = level.delay_ms {
        l.delay = base.delay + Duration::from_secs_f64(d / 1e3);
    }
    if let Some(j) = level.jitter_ms {
        l.jitter = Jitter::Uniform(Duration::from_secs_f64(j / 1e3));
    }
    if let Some(b) = level.bandwidth_mbps {
        l.bandwidth = Some(mbps_to_bytes(b));
    }
    if let (Some(e), Some(s)) = (level.stall_every_ms, level.stall_ms) {
        l.stall = Some(Stall {
            every: Duration::from_secs_f64(e / 1e3),
            length: Duration::from_secs_f64(s / 1e3),
        });
    }
    l
}

/// A pause level: the demo client's pause and how often it comes.
fn set_pause(p: &Pipeline, level: &Level) {
    let pause_us = (level.pause_ms.unwrap_or(0.0) * 1e3).round() as u64;
    let every_us = (level.every_s.unwrap_or(2.0) * 1e6).round() as u64;
    p.knobs.pause_every_us.store(every_us, Ordering::Relaxed);
    p.knobs.pause_us.store(pause_us, Ordering::Relaxed);
}

/// The observation the robot sent last, for the infer factor to replay.
fn captured_observation(p: &Pipeline) -> Result<stagetrace_net::msg::MsgMap, ExperimentError> {
    p.captured
        .lock()
        .ok()
        .and_then(|c| c.clone())
        .ok_or_else(|| {
            ExperimentError::Start(
                "no observation captured from the robot yet to replay; raise target.warmup_s"
                    .into(),
            )
        })
}

/// Names of this process's threads (`comm`), for checks that load threads are gone.
pub fn thread_names() -> Vec<String> {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| std::fs::read_to_string(e.path().join("comm")).ok())
        .map(|s| s.trim_end().to_owned())
        .collect()
}
