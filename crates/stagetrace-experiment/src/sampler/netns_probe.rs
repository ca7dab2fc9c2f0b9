//! The loss counters of network namespaces other than the sampler's own.
//!
//! `/proc/net/*` shows the namespace of the thread that reads it, so the
//! kernel bottleneck's namespaces ([`crate::netns`]) are invisible from the
//! sampler. Each of them gets one parked thread that entered it with
//! `setns(2)` and then sleeps (no CPU, no wake-ups): its
//! `/proc/self/task/<tid>/net/` is that namespace's `dev` and `snmp`, which
//! the sampler reads like its own. This costs one idle thread per namespace
//! for the path's lifetime, no process per sample and no `setns` on the
//! sampler's thread (which would have to get back out, and every other read
//! of that sample would see the wrong namespace if it did not). The path owns
//! the probes and stops them before it deletes the namespaces; the sampler
//! sees only the [`NetnsWatch`] list, labelled per namespace (never summed:
//! a drop on the client's side and one on the server's side mean different
//! things).

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// Thread name of a probe (kept out of the target's figures).
pub(crate) const PROBE_THREAD: &str = "st-netns-probe";

/// The namespaces to read: (name, the `net/` directory of a thread inside).
pub type NetnsWatch = Arc<Mutex<Vec<(String, PathBuf)>>>;

/// One parked thread inside a namespace.
#[derive(Debug)]
pub(crate) struct NetnsProbe {
    name: String,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl NetnsProbe {
    /// Start a thread that runs `enter` (moving itself into namespace
    /// `name`), then parks until stopped; its `net/` directory is added to
    /// `watch`.
    pub(crate) fn start(
        name: &str,
        enter: impl FnOnce() -> Result<(), String> + Send + 'static,
        watch: &NetnsWatch,
    ) -> Result<NetnsProbe, String> {
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = std::sync::mpsc::channel::<Result<i32, String>>();
        let thread = {
            let stop = Arc::clone(&stop);
            std::thread::Builder::new()
                .name(PROBE_THREAD.into())
                .spawn(move || {
                    if let Err(e) = enter() {
                        let _ = tx.send(Err(e));
                        return;
                    }
                    let _ = tx.send(Ok(rustix::thread::gettid().as_raw_nonzero().get()));
                    while !stop.load(Ordering::Acquire) {
                        std::thread::park();
                    }
                })
                .map_err(|e| e.to_string())?
        };
        let mut probe = NetnsProbe {
            name: name.to_owned(),
            stop,
            thread: Some(thread),
        };
        match rx.recv_timeout(Duration::from_secs(10)) {
            Ok(Ok(tid)) => {
                let dir = PathBuf::from(format!("/proc/self/task/{tid}/net"));
                if let Ok(mut w) = watch.lock() {
                    w.push((name.to_owned(), dir));
                }
                Ok(probe)
            }
            Ok(Err(e)) => {
                probe.stop(watch);
                Err(e)
            }
            Err(_) => {
                probe.stop(watch);
                Err(format!("the probe of namespace {name} did not start"))
            }
        }
    }

    /// Take the namespace off `watch` and end the thread.
    pub(crate) fn stop(&mut self, watch: &NetnsWatch) {
        if let Ok(mut w) = watch.lock() {
            w.retain(|(n, _)| *n != self.name);
        }
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// Without entering anything the probe sees this process's namespace:
    /// its directory reads the same `snmp` layout; stopping removes it.
    #[test]
    fn a_probe_lists_its_net_dir_until_stopped() {
        let watch = NetnsWatch::default();
        let mut p = NetnsProbe::start("here", || Ok(()), &watch).unwrap();
        let (name, dir) = watch.lock().unwrap()[0].clone();
        assert_eq!(name, "here");
        let c = super::super::netloss::NetCounters::read(&dir);
        if std::path::Path::new("/proc/net/snmp").exists() {
            assert!(
                c.udp_in_errors.is_some() && c.tcp_retrans.is_some(),
                "{c:?}"
            );
        }
        p.stop(&watch);
        assert!(watch.lock().unwrap().is_empty());
        // The kernel drops /proc/self/task/<tid> as the exited thread is
        // reaped, a moment after join returns: wait for it, bounded (1 s).
        for _ in 0..100 {
            if !dir.exists() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(!dir.exists(), "the thread ended");
        let err = NetnsProbe::start("nope", || Err("no such namespace".into()), &watch);
        assert_eq!(err.unwrap_err(), "no such namespace");
        assert!(watch.lock().unwrap().is_empty());
    }
}
