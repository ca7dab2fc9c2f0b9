//! What the host did to each request, sent back in the server timing and
//! landed on the client's record: a server thread that shares its core with
//! a busy loop shows the run-queue wait it really had, and a server that
//! sends none leaves the figures absent.

#![allow(clippy::unwrap_used)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use stagetrace::host::{thread_cpu_ns, HostCounters};
use stagetrace_net::{msg::MsgMap, msg::NdArray, ws::PolicyClient, ws::PolicyServer, InferTimer};
use stagetrace_schema::Figure;
use stagetrace_test_support::busy::pin_to_cpu;
use stagetrace_test_support::{rt, Observed};
use tracing::Instrument;

/// One request's truth, taken by the handler on the server's thread: its
/// wall time, its CPU time (`CLOCK_THREAD_CPUTIME_ID`, exact) and the
/// kernel's run-queue wait over the handler (`schedstat`).
///
/// wall − CPU is the time the handler was off its core: run-queue wait plus
/// whatever the hypervisor stole from the guest while the handler held the
/// core. Steal is invisible to a thread (it counts as neither run time nor
/// wait), so on a loaded VM wall − CPU exceeds the wait by it; it bounds
/// the kernel's wait from above, and the kernel's wait over the handler is
/// the part of the sent figure the handler can vouch for.
#[derive(Clone, Copy, Debug)]
struct Truth {
    wall_ns: f64,
    cpu_ns: f64,
    wait_ns: f64,
}

/// A running server beside its rival, and the handler's truths.
struct Setup {
    url: String,
    truths: Arc<Mutex<Vec<Truth>>>,
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Setup {
    /// Stops the server and the rival; the handler's truths.
    fn finish(self) -> Vec<Truth> {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads {
            t.join().unwrap();
        }
        let truths = self.truths.lock().unwrap().clone();
        truths
    }
}

/// A policy server on a current-thread runtime in a thread of its own,
/// pinned to CPU 0 beside a busy loop pinned there too: every request is
/// received, handled and answered on that one thread, and whatever of its
/// time the rival takes is run-queue wait.
fn server_sharing_cpu0(host_figures: bool) -> Setup {
    let stop = Arc::new(AtomicBool::new(false));
    let truths: Arc<Mutex<Vec<Truth>>> = Arc::default();
    let rival = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            pin_to_cpu(0);
            while !stop.load(Ordering::Relaxed) {
                std::hint::spin_loop();
            }
        })
    };
    let (url_tx, url_rx) = std::sync::mpsc::channel();
    let server = {
        let (stop, truths) = (Arc::clone(&stop), Arc::clone(&truths));
        std::thread::spawn(move || {
            pin_to_cpu(0);
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let server = PolicyServer::builder()
                    .host_figures(host_figures)
                    .spawn("127.0.0.1:0", move |_req: MsgMap, _timer: InferTimer| {
                        let truths = Arc::clone(&truths);
                        async move {
                            // 20 ms of wall time, busy all along: the rival
                            // takes about half of it.
                            // Wall brackets the wait, the wait brackets
                            // the CPU time: a preemption between two reads
                            // lands in wall − CPU whenever it lands in the
                            // wait.
                            let t0 = Instant::now();
                            let w0 = run_wait_ns();
                            let c0 = thread_cpu_ns().unwrap();
                            while t0.elapsed() < Duration::from_millis(20) {
                                std::hint::spin_loop();
                            }
                            let cpu = thread_cpu_ns().unwrap() - c0;
                            let wait = run_wait_ns() - w0;
                            truths.lock().unwrap().push(Truth {
                                wall_ns: t0.elapsed().as_nanos() as f64,
                                cpu_ns: cpu as f64,
                                wait_ns: wait as f64,
                            });
                            Ok(MsgMap::new().with("actions", NdArray::from_f32(&[0.5; 7], &[7])))
                        }
                    })
                    .await
                    .unwrap();
                url_tx.send(server.url()).unwrap();
                while !stop.load(Ordering::Relaxed) {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                server.shutdown().await;
            });
        })
    };
    let url = url_rx.recv_timeout(Duration::from_secs(10)).unwrap();
    Setup {
        url,
        truths,
        stop,
        threads: vec![rival, server],
    }
}

/// This thread's run-queue wait so far, from the kernel (`schedstat`).
fn run_wait_ns() -> u64 {
    HostCounters::now().run_wait_ns.unwrap_or(0)
}

fn calls(url: &str, n: u64) {
    rt().block_on(async {
        let mut client = PolicyClient::connect(url).await.unwrap();
        for seq in 0..n {
            client
                .infer(&MsgMap::new().with("state", 1.0))
                .instrument(tracing::info_span!("call", seq = seq))
                .await
                .unwrap();
        }
    });
}

#[test]
fn a_server_thread_sharing_its_core_sends_the_run_queue_wait_it_had() {
    if HostCounters::now().run_wait_ns.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "no /proc/thread-self/schedstat under CI"
        );
        return;
    }
    let mut obs = Observed::new();
    let setup = server_sharing_cpu0(true);
    calls(&setup.url, 8);
    let truths = setup.finish();
    let records = obs.finish();
    assert_eq!((records.len(), truths.len()), (8, 8));
    for (rec, truth) in records.iter().zip(&truths) {
        let wait = rec.get(Figure::ServerRunWait).unwrap() as f64;
        let server = rec.get(Figure::Server).unwrap() as f64;
        let stall = rec.get(Figure::ServerCpuStall);
        let off_core = truth.wall_ns - truth.cpu_ns;
        // schedstat adds a wait when the thread gets the core back, so 2 %
        // of the wall time is the kernel's only slack.
        let slack = 0.02 * truth.wall_ns;
        // The rival took a real share of the handler's core, and the
        // kernel counted it as a wait: never more than the time off the
        // core.
        assert!(truth.wait_ns > 0.2 * truth.wall_ns, "{truth:?}");
        assert!(truth.wait_ns <= off_core + slack, "{truth:?}");
        // The figure covers receive → send: at least the handler's own
        // wait, at most that plus the rest of the server's time (decoding,
        // encoding).
        let outside_handler = server - truth.wall_ns;
        assert!(
            wait >= truth.wait_ns - slack && wait <= truth.wait_ns + outside_handler + slack,
            "server run-queue wait {wait} ns; handler's own {truth:?}, server {server} ns"
        );
        // The host was short of a CPU: some task waited while the call ran
        // (where the kernel has PSI).
        if let Some(stall) = stall {
            assert!(stall > 0, "{rec:?}");
        }
    }
}

#[test]
fn a_server_that_sends_no_host_figures_leaves_them_absent() {
    let mut obs = Observed::new();
    let setup = server_sharing_cpu0(false);
    calls(&setup.url, 2);
    setup.finish();
    let records = obs.finish();
    assert_eq!(records.len(), 2);
    for rec in &records {
        for f in [
            Figure::ServerRunWait,
            Figure::ServerCpuStall,
            Figure::ServerGc,
        ] {
            assert_eq!(rec.get(f), None, "{f} from a server that sends none");
        }
        // The rest of the split is there as before.
        assert!(rec.get(Figure::Uplink).is_some() && rec.get(Figure::Infer).is_some());
    }
}
