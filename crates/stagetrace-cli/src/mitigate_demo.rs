//! `stagetrace demo` with mitigation knobs (`--clients`, `--batch`,
//! `--batch-wait-ms`, `--cache`, `--concurrency`, `--model-per-item-ms`):
//! N closed-loop robot clients against a loopback policy server whose model
//! costs a + b·batch on one simulated GPU, with the mitigations of
//! `stagetrace-mitigate` turned on one at a time. Every call carries an
//! `output_digest`, and a given (client, call) sends the same observation in
//! every run, so `stagetrace compare BEFORE AFTER` joins two runs by seq.
//! See `docs/mitigations.md`.

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use stagetrace::StageLayer;
use stagetrace_mitigate::{
    action_cache, record_action_digest, Admission, AdmissionConfig, AdmittedHandler, BatchConfig,
    BatchedHandler, Batcher, CachedHandler, KeySpec,
};
use stagetrace_net::ws::HandlerFuture;
use stagetrace_net::{
    ClientError, Handler, HandlerError, InferTimer, MsgMap, NdArray, PolicyClient, PolicyServer,
};
use tracing::Instrument;
use tracing_subscriber::layer::SubscriberExt;

/// The mitigation knobs of `stagetrace demo`. Any of `--clients` > 1,
/// `--batch` > 1, `--cache`, `--concurrency` switches the demo to the
/// mitigation scenario: closed-loop clients (no pacing: `--hz` and the
/// camera / actuator / proxy knobs do not apply), model cost
/// `--model-ms` + `--model-per-item-ms` × batch.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct MitigateArgs {
    /// Concurrent robot clients, each calling as fast as answers come back
    /// (mitigation scenario; `--calls` is per client).
    #[arg(long, default_value_t = 1)]
    pub(crate) clients: u64,
    /// Batch up to N requests per model run (0 or 1: one at a time).
    #[arg(long, default_value_t = 0)]
    pub(crate) batch: usize,
    /// Longest wait for a batch to fill, ms.
    #[arg(long, default_value_t = 5)]
    pub(crate) batch_wait_ms: u64,
    /// Cache answers, bounded to this many MiB (0: no cache).
    #[arg(long, default_value_t = 0)]
    pub(crate) cache: u64,
    /// Key the cache on the prompt only — wrong on purpose (the image
    /// matters): `stagetrace compare` catches the changed outputs.
    #[arg(long)]
    pub(crate) cache_prompt_only: bool,
    /// Distinct camera scenes the clients cycle through (repeats can hit the cache).
    #[arg(long, default_value_t = 8)]
    pub(crate) scenes: u64,
    /// Admission control: requests served at once (0: none).
    #[arg(long, default_value_t = 0)]
    pub(crate) concurrency: usize,
    /// Admission control: requests that may wait for a slot.
    #[arg(long, default_value_t = 4)]
    pub(crate) queue: usize,
    /// Admission control: longest wait for a slot, ms.
    #[arg(long, default_value_t = 50)]
    pub(crate) queue_timeout_ms: u64,
    /// Model cost a + b·batch: b, ms per request in the batch (a is --model-ms).
    #[arg(long, default_value_t = 0.0)]
    pub(crate) model_per_item_ms: f64,
}

impl MitigateArgs {
    /// Whether any knob asks for the mitigation scenario.
    pub(crate) fn active(&self) -> bool {
        self.clients > 1 || self.batch > 1 || self.cache > 0 || self.concurrency > 0
    }
}

/// One simulated GPU: a batch of n costs a + b·n, one batch at a time.
#[derive(Clone)]
struct Gpu {
    lock: Arc<tokio::sync::Mutex<()>>,
    a: Duration,
    b: Duration,
}

impl Gpu {
    async fn run(&self, batch: &[MsgMap], timer: Option<&InferTimer>) -> Vec<MsgMap> {
        let _gpu = self.lock.lock().await;
        if let Some(t) = timer {
            // Waiting for the GPU was queue; inference starts now.
            t.infer_start();
        }
        let n = u32::try_from(batch.len()).unwrap_or(u32::MAX);
        tokio::time::sleep(self.a + self.b * n).await;
        batch.iter().map(policy).collect()
    }
}

/// The policy's answer: a deterministic function of the whole observation.
fn policy(obs: &MsgMap) -> MsgMap {
    let sum: u64 = obs.to_msgpack().iter().map(|&b| u64::from(b)).sum();
    let acts: Vec<f32> = (0..14).map(|i| (sum % 10_000) as f32 + i as f32).collect();
    MsgMap::new().with("actions", NdArray::from_f32(&acts, &[2, 7]))
}

/// A handler chosen at run time.
struct Dyn(Arc<dyn Handler>);

impl Handler for Dyn {
    fn call(&self, request: MsgMap, timer: InferTimer) -> HandlerFuture {
        self.0.call(request, timer)
    }
}

fn ms(v: f64) -> Duration {
    Duration::from_secs_f64(v.max(0.0) / 1e3)
}

/// Run the mitigation scenario; records go to `out`.
pub(crate) fn run(k: &MitigateArgs, model_ms: f64, calls: u64, out: &Path, json: bool) -> ExitCode {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("stagetrace demo: cannot start the runtime: {e}");
            return ExitCode::from(2);
        }
    };
    match rt.block_on(scenario(k, model_ms, calls, out, json)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("stagetrace demo: {e}");
            ExitCode::from(2)
        }
    }
}

async fn scenario(
    k: &MitigateArgs,
    model_ms: f64,
    calls: u64,
    out: &Path,
    json: bool,
) -> Result<ExitCode, String> {
    let (layer, guard) = StageLayer::builder()
        .output_dir(out)
        .build()
        .map_err(|e| e.to_string())?;
    let _default = tracing::subscriber::set_default(tracing_subscriber::registry().with(layer));

    let gpu = Gpu {
        lock: Arc::default(),
        a: ms(model_ms),
        b: ms(k.model_per_item_ms),
    };
    // model → [batcher] → [cache] → [admission], innermost first.
    let mut batcher = None;
    let mut handler: Arc<dyn Handler> = if k.batch > 1 {
        let g = gpu.clone();
        let b = Batcher::spawn(
            BatchConfig::default()
                .max_batch(k.batch)
                .max_wait(Duration::from_millis(k.batch_wait_ms)),
            move |xs: Vec<MsgMap>| {
                let g = g.clone();
                async move { Ok::<_, HandlerError>(g.run(&xs, None).await) }
            },
        )
        .map_err(|e| e.to_string())?;
        batcher = Some(b.clone());
        Arc::new(BatchedHandler::new(b))
    } else {
        let g = gpu.clone();
        Arc::new(move |obs: MsgMap, timer: InferTimer| {
            let g = g.clone();
            async move {
                let mut out = g.run(std::slice::from_ref(&obs), Some(&timer)).await;
                out.pop()
                    .ok_or_else(|| HandlerError::new("the model returned nothing"))
            }
        })
    };
    let mut cache = None;
    if k.cache > 0 {
        let c = action_cache(k.cache << 20);
        let spec = if k.cache_prompt_only {
            KeySpec::Only(vec!["prompt".into()])
        } else {
            KeySpec::All
        };
        cache = Some(c.clone());
        handler = Arc::new(CachedHandler::new(Dyn(handler), c, spec));
    }
    let mut admission = None;
    if k.concurrency > 0 {
        let a = Admission::new(
            AdmissionConfig::default()
                .max_concurrency(k.concurrency)
                .max_queue(k.queue)
                .queue_timeout(Duration::from_millis(k.queue_timeout_ms)),
        );
        admission = Some(a.clone());
        handler = Arc::new(AdmittedHandler::new(Dyn(handler), a));
    }
    let server = PolicyServer::builder()
        .max_concurrency(1024)
        .spawn("127.0.0.1:0", Dyn(handler))
        .await
        .map_err(|e| format!("cannot start the policy server: {e}"))?;

    let start = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..k.clients.max(1) {
        let url = server.url();
        let scenes = k.scenes.max(1);
        tasks.push(tokio::spawn(async move {
            let mut client = PolicyClient::connect(&url).await?;
            let (mut ok, mut failed) = (0u64, 0u64);
            for i in 0..calls {
                // The same (client, i) sends the same observation in every
                // run, so `compare` can join two runs' outputs by seq.
                let seq = c * 1_000_000 + i;
                let scene = ((c * calls + i) % scenes) as u8;
                let obs = MsgMap::new()
                    .with("prompt", "put the cup on the plate")
                    .with(
                        "image",
                        NdArray::from_u8(vec![scene; 64 * 64 * 3], &[64, 64, 3]),
                    );
                let call = tracing::info_span!("call", seq = seq);
                let r = async {
                    let r = client.infer(&obs).await;
                    if let Ok(reply) = &r {
                        record_action_digest(&tracing::Span::current(), &reply.action);
                    }
                    r
                }
                .instrument(call)
                .await;
                match r {
                    Ok(_) => ok += 1,
                    // Shed or expired: counted, then a fresh connection.
                    Err(ClientError::Server(_)) => {
                        failed += 1;
                        client.reconnect().await?;
                    }
                    Err(e) => return Err(e),
                }
            }
            Ok::<_, ClientError>((ok, failed))
        }));
    }
    let (mut ok, mut failed) = (0u64, 0u64);
    let mut first_error = None;
    for t in tasks {
        match t.await {
            Ok(Ok((o, f))) => {
                ok += o;
                failed += f;
            }
            Ok(Err(e)) => first_error = first_error.or(Some(e.to_string())),
            Err(e) => first_error = first_error.or(Some(e.to_string())),
        }
    }
    let wall = start.elapsed().as_secs_f64();
    server.shutdown().await;
    let summary = guard.finish();
    if let Some(e) = &first_error {
        eprintln!("stagetrace demo: a client stopped: {e}");
    }

    let mut lines = vec![format!(
        "{ok} calls answered, {failed} failed, in {wall:.2} s: {:.1} calls/s",
        ok as f64 / wall.max(1e-9)
    )];
    let mut obj = serde_json::json!({
        "clients": k.clients.max(1),
        "calls_answered": ok,
        "calls_failed": failed,
        "wall_s": wall,
        "throughput_per_s": ok as f64 / wall.max(1e-9),
        "out": out.display().to_string(),
    });
    if let Some(b) = batcher {
        let s = b.stats();
        lines.push(format!(
            "batcher: {} batches, mean size {:.2}, by size {:?}, {} expired, {} refused",
            s.batches,
            s.mean_batch(),
            s.by_size,
            s.expired,
            s.queue_full
        ));
        obj["batch"] = serde_json::json!({
            "batches": s.batches, "mean_size": s.mean_batch(), "by_size": s.by_size,
            "expired": s.expired, "refused": s.queue_full,
        });
    }
    if let Some(c) = cache {
        c.run_pending_tasks();
        let s = c.stats();
        lines.push(format!(
            "cache: {} hits, {} misses ({:.0}% hit), {} entries, {} of {} bytes",
            s.hits,
            s.misses,
            s.hit_ratio() * 100.0,
            s.entries,
            s.weighted_bytes,
            s.max_bytes
        ));
        obj["cache"] = serde_json::json!({
            "hits": s.hits, "misses": s.misses, "entries": s.entries,
            "weighted_bytes": s.weighted_bytes, "max_bytes": s.max_bytes,
        });
    }
    if let Some(a) = admission {
        let s = a.stats();
        lines.push(format!(
            "admission: {} admitted, {} shed ({} queue full, {} queue timeout)",
            s.admitted,
            s.shed(),
            s.shed_queue_full,
            s.shed_timeout
        ));
        obj["admission"] = serde_json::json!({
            "admitted": s.admitted, "shed_queue_full": s.shed_queue_full,
            "shed_timeout": s.shed_timeout,
        });
    }
    lines.push(format!("records in {}", out.display()));
    if json {
        println!("{}", serde_json::to_string_pretty(&obj).unwrap_or_default());
    } else {
        println!("{}", summary.table());
        for l in lines {
            println!("{l}");
        }
    }
    Ok(if ok == 0 || first_error.is_some() {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}
