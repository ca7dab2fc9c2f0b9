//! A stage opened by a method rather than a `with`: the transport stage of
//! `TracedClientPolicy` (`call.transport(peer)`), `call.stage(name)`, or a
//! stage outside any call (`Recorder.stage`). Closing it (or dropping it)
//! ends the stage; its time goes into its call as a Rust stage span's would.

use std::cell::{RefCell, RefMut};
use std::sync::Arc;

use pyo3::sync::GILProtected;

use pyo3::prelude::*;
use stagetrace::direct::{DirectTransport, Mark};
use stagetrace::Stage;

use crate::shared::Shared;
use crate::sock;
use crate::state::CallCell;
use crate::timing;

/// Why a call failed, as its record says (`error`): the core takes a
/// `&'static str`, so Python's reason is matched onto the Rust client's words.
pub(crate) fn reason(r: &str) -> &'static str {
    const KNOWN: [&str; 11] = [
        "timeout",
        "disconnected",
        "server error",
        "bad response",
        "not connected",
        "connect failed",
        "exception",
        "cancelled",
        // An async server dropped the observation (stagetrace.lerobot):
        // a newer one took its place, or it was skipped; or the server
        // said nothing of it.
        "replaced",
        "skipped",
        "no timing",
    ];
    KNOWN.into_iter().find(|k| *k == r).unwrap_or("error")
}

/// What is still open of a span.
#[derive(Debug)]
struct Open {
    /// The transport's id and server timing (transport spans only).
    transport: Option<DirectTransport>,
}

/// A stage of a call (or outside any), from creation to `close`.
#[pyclass(module = "stagetrace._native", frozen)]
pub(crate) struct Span {
    /// The call it belongs to (`None`: outside any call).
    call: Option<Arc<CallCell>>,
    shared: Arc<Shared>,
    stage: Stage,
    start: Mark,
    nested: bool,
    /// Touched with the GIL held only (see `CallCell`).
    open: GILProtected<RefCell<Option<Open>>>,
}

impl Span {
    /// A stage `name` of `call`, started now.
    pub(crate) fn stage_of(py: Python<'_>, call: &Arc<CallCell>, name: &str) -> PyResult<Span> {
        let stage = call.shared.stage(name, None)?;
        let transport = (stage == Stage::Transport).then(|| DirectTransport::start(None));
        Ok(Span::open(py, call, stage, transport))
    }

    /// The transport stage of `call`, started now, to `peer`.
    pub(crate) fn transport_of(py: Python<'_>, call: &Arc<CallCell>, peer: Option<&str>) -> Span {
        Span::open(
            py,
            call,
            Stage::Transport,
            Some(DirectTransport::start(peer)),
        )
    }

    fn open(
        py: Python<'_>,
        call: &Arc<CallCell>,
        stage: Stage,
        transport: Option<DirectTransport>,
    ) -> Span {
        let start = Mark::of_stage(stage, call.shared.calls.host_figures());
        let (nested, running) = call.open_handle(py);
        Span {
            // A span of a call that has not started or has ended counts as
            // outside any call.
            call: running.then(|| Arc::clone(call)),
            shared: Arc::clone(&call.shared),
            stage,
            start,
            nested,
            open: GILProtected::new(RefCell::new(Some(Open { transport }))),
        }
    }

    /// A stage outside any call, started now.
    pub(crate) fn outside(shared: Arc<Shared>, name: &str) -> PyResult<Span> {
        let stage = shared.stage(name, None)?;
        Ok(Span {
            call: None,
            shared,
            stage,
            start: Mark::now(),
            nested: false,
            open: GILProtected::new(RefCell::new(Some(Open { transport: None }))),
        })
    }

    /// The open part; `None` when taken already (no Python code runs
    /// while it is held, so that never happens: but never a panic).
    fn lock<'a>(&'a self, py: Python<'a>) -> Option<RefMut<'a, Option<Open>>> {
        self.open.get(py).try_borrow_mut().ok()
    }

    /// Runs `f` on the open transport of this span, if it is one.
    fn with_transport(&self, py: Python<'_>, f: impl FnOnce(&mut DirectTransport)) {
        if let Some(mut g) = self.lock(py) {
            if let Some(tr) = g.as_mut().and_then(|o| o.transport.as_mut()) {
                f(tr);
            }
        }
    }

    /// End the span now (once), marking its call failed first if asked.
    fn end(&self, py: Python<'_>, failed: bool) {
        let Some(open) = self.lock(py).and_then(|mut g| g.take()) else {
            return;
        };
        match &self.call {
            Some(call) => {
                if failed {
                    call.with_call(py, |c| c.mark_failed("exception"));
                }
                call.close_handle(
                    py,
                    self.stage,
                    self.start,
                    self.nested,
                    open.transport.as_ref(),
                );
            }
            None => self.shared.calls.count_ignored_stage(),
        }
    }
}

impl Drop for Span {
    /// A span Python collects without `close` (an exception skipped it)
    /// ends here.
    fn drop(&mut self) {
        // Python drops it holding the GIL; this only borrows it.
        Python::with_gil(|py| self.end(py, false));
    }
}

#[pymethods]
impl Span {
    /// A stage inside this span, started now: `capture`, `infer`,
    /// `dispatch`, ... or a name mapped onto one.
    fn stage(&self, py: Python<'_>, name: &str) -> PyResult<Span> {
        match &self.call {
            Some(call) => Span::stage_of(py, call, name),
            None => Span::outside(Arc::clone(&self.shared), name),
        }
    }

    /// The transport stage inside this span, started now: request handed to
    /// the send API → whole response received. `peer` names the server (one
    /// clock-offset estimate per peer).
    #[pyo3(signature = (peer=None))]
    fn transport(&self, py: Python<'_>, peer: Option<&str>) -> Span {
        match &self.call {
            Some(call) => Span::transport_of(py, call, peer),
            None => Span {
                call: None,
                shared: Arc::clone(&self.shared),
                stage: Stage::Transport,
                start: Mark::now(),
                nested: false,
                open: GILProtected::new(RefCell::new(Some(Open { transport: None }))),
            },
        }
    }

    /// The W3C `traceparent` to send with the request of this transport
    /// span (`None` outside a call).
    fn traceparent(&self, py: Python<'_>) -> Option<String> {
        let call = self.call.as_ref()?;
        let transport = self.lock(py)?.as_ref().and_then(|o| o.transport);
        call.trace_parent(py, transport.as_ref())
            .map(|tp| tp.to_string())
    }

    /// Attach the response's `server_timing` map (a dict as msgpack decoded
    /// it; through relays, their nested levels too) to this transport span.
    /// The core checks it (keys, units, ranges, the relays' stamps);
    /// a malformed map is ignored and counted as a rejected header. Returns
    /// whether it was taken.
    fn server_timing(&self, map: &Bound<'_, PyAny>) -> bool {
        let parsed = timing::chain_from_python(map);
        let Some(mut g) = self.lock(map.py()) else {
            return false;
        };
        let Some(open) = g.as_mut() else {
            return false;
        };
        match parsed {
            Some(chain) if !chain.map.timing.is_empty() => {
                if let Some(tr) = open.transport.as_mut() {
                    tr.record_server_timing(chain.map.timing);
                    if !chain.hops.is_empty() {
                        tr.record_hops(chain.hops);
                    }
                }
                true
            }
            Some(_) => false,
            None => {
                self.shared.calls.count_rejected_header();
                false
            }
        }
    }

    /// The request's first write, on `stagetrace._native.clock_ns()`'s
    /// clock: `first_ns` just before the write that took its first bytes
    /// (the clock estimate leaves the robot's work before it out), and
    /// `written_ns` when that write returned: the kernel had the bytes then,
    /// and the time from this span's start to it is the robot's
    /// `tx_wait_ms`. Either may be None. No effect on a span that is not a
    /// transport or has ended; a stamp outside the span is ignored by the
    /// core.
    #[pyo3(signature = (first_ns=None, written_ns=None))]
    fn request_sent(&self, py: Python<'_>, first_ns: Option<u64>, written_ns: Option<u64>) {
        self.with_transport(py, |tr| {
            if let Some(at) = first_ns.and_then(sock::instant_of) {
                tr.record_request_first_byte(at);
            }
            if let Some(at) = written_ns.and_then(sock::instant_of) {
                tr.record_request_written(at);
            }
        });
    }

    /// When the response's first bytes arrived (`clock_ns()`'s clock): the
    /// clock estimate then leaves the response's transfer out of the
    /// offset.
    fn response_first_byte(&self, py: Python<'_>, at_ns: u64) {
        if let Some(at) = sock::instant_of(at_ns) {
            self.with_transport(py, |tr| tr.record_response_first_byte(at));
        }
    }

    /// When the kernel had the response's last bytes (a kernel receive
    /// stamp turned onto `clock_ns()`'s clock with
    /// `wall_to_clock_ns`): the roundtrip ends there and the time until
    /// this span ends is the robot's `rx_wait_ms`.
    fn response_kernel_rx(&self, py: Python<'_>, at_ns: u64) {
        if let Some(at) = sock::instant_of(at_ns) {
            self.with_transport(py, |tr| tr.record_response_kernel_rx(at));
        }
    }

    /// Mark the enclosing call failed (`failed: true, error: reason` on its
    /// record; kept out of the stage figures).
    fn fail(&self, py: Python<'_>, why: &str) {
        let r = reason(why);
        if let Some(call) = &self.call {
            call.with_call(py, |c| c.mark_failed(r));
        }
    }

    /// Attach a digest of the call's output (`output_digest` on the record).
    fn output_digest(&self, py: Python<'_>, digest: u64) {
        if let Some(call) = &self.call {
            call.with_call(py, |c| c.record_output_digest(digest));
        }
    }

    /// End the span now (a second close does nothing). `failed` marks the
    /// enclosing call failed with reason "exception" first.
    #[pyo3(signature = (failed=false))]
    fn close(&self, py: Python<'_>, failed: bool) {
        self.end(py, failed);
    }

    /// Whether `close` has run.
    #[getter]
    fn closed(&self, py: Python<'_>) -> bool {
        self.lock(py).is_some_and(|g| g.is_none())
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        let open = self.lock(py).is_some_and(|g| g.is_some());
        let state = match (open, self.call.is_some()) {
            (false, _) => "closed",
            (true, false) => "outside any call",
            (true, true) => "open",
        };
        format!("<stagetrace {} span, {state}>", self.stage.name())
    }
}
