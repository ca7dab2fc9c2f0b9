//! The handler chain of a simulated server: model → [batcher] → [cache] →
//! [admission], innermost first, each part kept for its counters.

use std::sync::Arc;

use stagetrace_mitigate::tower::AdmissionLayer;
use stagetrace_mitigate::{
    action_cache, ActionCache, Admission, AdmissionStats, AdmittedHandler, BatchStats,
    BatchedHandler, Batcher, CacheStats, CachedHandler,
};
use stagetrace_net::ws::HandlerFuture;
use stagetrace_net::{msg::MsgMap, ws::ConnectionGuard, ws::Handler, ws::HandlerError, InferTimer};

use super::config::ServerConfig;
use crate::{SimError, Transport};

/// A handler chosen at run time.
#[derive(Clone)]
pub(crate) struct DynHandler(pub(crate) Arc<dyn Handler>);

impl Handler for DynHandler {
    fn call(&self, request: MsgMap, timer: InferTimer) -> HandlerFuture {
        self.0.call(request, timer)
    }

    fn connect(&self) -> ConnectionGuard {
        self.0.connect()
    }
}

/// Admission control: a handler wrapper over WebSocket, a tower layer over
/// HTTP (so a shed request is a `503`).
#[derive(Clone, Debug)]
pub(crate) enum AdmissionPart {
    Ws(Admission),
    Http(AdmissionLayer),
}

/// The mitigations in front of the model, for their counters.
#[derive(Clone, Debug, Default)]
pub(crate) struct Parts {
    pub(crate) batcher: Option<Batcher<MsgMap, MsgMap>>,
    pub(crate) cache: Option<ActionCache>,
    pub(crate) admission: Option<AdmissionPart>,
}

impl Parts {
    pub(crate) fn batch_stats(&self) -> Option<BatchStats> {
        self.batcher.as_ref().map(Batcher::stats)
    }

    pub(crate) fn cache_stats(&self) -> Option<CacheStats> {
        self.cache.as_ref().map(|c| {
            // Entry count and weight are as of the last housekeeping.
            c.run_pending_tasks();
            c.stats()
        })
    }

    pub(crate) fn admission_stats(&self) -> Option<AdmissionStats> {
        self.admission.as_ref().map(|a| match a {
            AdmissionPart::Ws(a) => a.stats(),
            AdmissionPart::Http(l) => l.stats(),
        })
    }
}

/// The handler to serve and the parts it is made of. Needs a tokio runtime
/// (the batcher's worker is a task).
pub(crate) fn build(cfg: &ServerConfig) -> Result<(DynHandler, Parts), SimError> {
    let mut parts = Parts::default();
    let mut model = cfg.model.clone();
    if cfg.mitigated() {
        // The server lets every request through to the mitigations; the
        // model itself runs `concurrency` at once, the wait reported as queue.
        model = model.slots(cfg.concurrency);
    }
    let mut handler: Arc<dyn Handler> = match cfg.batch {
        Some(batch) => {
            let m = model.clone();
            let b = Batcher::spawn(batch, move |xs: Vec<MsgMap>| {
                let m = m.clone();
                async move { Ok::<_, HandlerError>(m.infer_batch(xs).await) }
            })
            .map_err(|e| SimError::Start {
                what: "the batcher",
                reason: e.to_string(),
            })?;
            parts.batcher = Some(b.clone());
            Arc::new(BatchedHandler::new(b))
        }
        None => Arc::new(model),
    };
    if let Some(cache) = &cfg.cache {
        let c = action_cache(cache.max_bytes);
        parts.cache = Some(c.clone());
        handler = Arc::new(CachedHandler::new(
            DynHandler(handler),
            c,
            cache.key.clone(),
        ));
    }
    if let Some(admission) = cfg.admission {
        match cfg.transport {
            Transport::Ws => {
                let a = Admission::new(admission);
                parts.admission = Some(AdmissionPart::Ws(a.clone()));
                handler = Arc::new(AdmittedHandler::new(DynHandler(handler), a));
            }
            Transport::Http => {
                parts.admission = Some(AdmissionPart::Http(AdmissionLayer::new(admission)));
            }
        }
    }
    Ok((DynHandler(handler), parts))
}
