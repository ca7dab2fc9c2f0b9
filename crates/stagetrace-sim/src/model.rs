//! The simulated model: pre-processing (a checksum over a sample of the
//! frame), the model itself (a cost of `a + b·batch`, waited out precisely),
//! post-processing (an [`ACTION_CHUNK`] derived from the checksum), and
//! optionally a one-off step of the server's clock.

use std::sync::Arc;
use std::time::{Duration, Instant};

use stagetrace_net::ws::HandlerFuture;
use stagetrace_net::{
    msg::MsgMap, msg::NdArray, ws::Handler, ws::HandlerError, InferTimer, ServerClock,
};
use tokio::sync::Semaphore;

use crate::checksum::fnv1a_strided;
use crate::random::pseudo_actions;
use crate::robot::IMAGE_KEY;
use crate::wait::{sleep_until_precise, Spin};

/// Action chunk shape the simulated model answers: 50 steps × 7 joints
/// (ALOHA-style).
pub const ACTION_CHUNK: [u64; 2] = [50, 7];

/// A step of the server's clock during a run, as an NTP step would make it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClockStep {
    /// The clock jumps while the model answers the call with this `seq`.
    pub at_seq: u64,
    /// The jump, ns (negative: backwards).
    pub jump_ns: i64,
}

/// The simulated policy. One request costs `a + b` ([`SimModel::new`],
/// [`SimModel::per_item`]), a batch of `n` costs `a + b·n`. Serve it with
/// [`crate::SimServer::start`] (or any `stagetrace-net` server: it is a
/// [`Handler`]), or call [`SimModel::infer`] / [`SimModel::infer_batch`].
///
/// The answer is a deterministic function of the frame
/// (`observation/image`): the same frame gets the same action chunk in every
/// run, a different frame a different one.
#[derive(Clone, Debug)]
pub struct SimModel {
    cost: Duration,
    per_item: Duration,
    stride: usize,
    spin: Spin,
    step: Option<(ServerClock, ClockStep)>,
    /// One simulated GPU: requests (or batches) wait for a slot; the wait is
    /// reported as `queue`.
    gpu: Option<Arc<Semaphore>>,
}

impl SimModel {
    /// A model costing `cost` a call; checksum over every 256th byte of the
    /// frame, [`Spin::Yielding`] waits, no clock step, as many calls at once
    /// as the server lets through.
    pub fn new(cost: Duration) -> Self {
        SimModel {
            cost,
            per_item: Duration::ZERO,
            stride: 256,
            spin: Spin::Yielding,
            step: None,
            gpu: None,
        }
    }

    /// Cost per request in a batch (`b` of `a + b·batch`; default 0).
    #[must_use]
    pub fn per_item(mut self, cost: Duration) -> Self {
        self.per_item = cost;
        self
    }

    /// Pre-processing reads every `stride`-th byte of the frame (0 counts as
    /// 1). Sampling keeps `infer` close to the model's cost even for large
    /// frames and in debug builds; the stride also decides the output.
    #[must_use]
    pub fn checksum_stride(mut self, stride: usize) -> Self {
        self.stride = stride;
        self
    }

    /// How the model's wait ends (see [`Spin`]).
    #[must_use]
    pub fn spin(mut self, spin: Spin) -> Self {
        self.spin = spin;
        self
    }

    /// Step `clock` (the server's) by `step.jump_ns` while answering the
    /// call numbered `step.at_seq` (read from the observation's `seq`).
    #[must_use]
    pub fn clock_step(mut self, clock: ServerClock, step: ClockStep) -> Self {
        self.step = Some((clock, step));
        self
    }

    /// Run at most `n` requests or batches at once (one simulated GPU for
    /// `n = 1`); the wait for a slot is reported as `queue`. 0 counts as 1.
    #[must_use]
    pub fn slots(mut self, n: usize) -> Self {
        self.gpu = Some(Arc::new(Semaphore::new(n.clamp(1, Semaphore::MAX_PERMITS))));
        self
    }

    /// The model's cost for a batch of `n`.
    pub fn cost_of(&self, n: usize) -> Duration {
        self.cost + self.per_item * u32::try_from(n).unwrap_or(u32::MAX)
    }

    fn checksum(&self, obs: &MsgMap) -> u64 {
        obs.array(IMAGE_KEY)
            .map_or(0, |a| fnv1a_strided(&a.data, self.stride))
    }

    fn answer(frame_sum: u64) -> MsgMap {
        let n = (ACTION_CHUNK[0] * ACTION_CHUNK[1]) as usize;
        let chunk = pseudo_actions(frame_sum, n);
        MsgMap::new().with("actions", NdArray::from_f32(&chunk, &ACTION_CHUNK))
    }

    fn maybe_step(&self, obs: &MsgMap) {
        if let Some((clock, step)) = &self.step {
            if obs.get("seq").and_then(rmpv::Value::as_u64) == Some(step.at_seq) {
                clock.step_ns(step.jump_ns);
            }
        }
    }

    /// Answer one observation: `{"actions": f32 array of ACTION_CHUNK}`.
    /// Marks the end of pre-processing and the start of post-processing on
    /// `timer` (and the start of inference, after the wait for a slot).
    pub async fn infer(&self, obs: MsgMap, timer: InferTimer) -> Result<MsgMap, HandlerError> {
        let _slot = match &self.gpu {
            Some(gpu) => {
                let slot = gpu.acquire().await.ok();
                timer.infer_start();
                slot
            }
            None => None,
        };
        let frame_sum = self.checksum(&obs);
        timer.pre_done();
        sleep_until_precise(Instant::now() + self.cost_of(1), self.spin).await;
        timer.post_start();
        let answer = Self::answer(frame_sum);
        self.maybe_step(&obs);
        Ok(answer)
    }

    /// Answer a batch in one model run costing `a + b·n`, in order.
    pub async fn infer_batch(&self, batch: Vec<MsgMap>) -> Vec<MsgMap> {
        let _slot = match &self.gpu {
            Some(gpu) => gpu.acquire().await.ok(),
            None => None,
        };
        let sums: Vec<u64> = batch.iter().map(|o| self.checksum(o)).collect();
        sleep_until_precise(Instant::now() + self.cost_of(batch.len()), self.spin).await;
        for obs in &batch {
            self.maybe_step(obs);
        }
        sums.into_iter().map(Self::answer).collect()
    }
}

impl Handler for SimModel {
    fn call(&self, request: MsgMap, timer: InferTimer) -> HandlerFuture {
        let model = self.clone();
        Box::pin(async move { model.infer(request, timer).await })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_costs_a_plus_b_per_item() {
        let m = SimModel::new(Duration::from_millis(20)).per_item(Duration::from_millis(2));
        assert_eq!(m.cost_of(1), Duration::from_millis(22));
        assert_eq!(m.cost_of(4), Duration::from_millis(28));
    }

    #[tokio::test]
    async fn batch_answers_match_single_answers() {
        let m = SimModel::new(Duration::ZERO).slots(1);
        let frame =
            |v: u8| MsgMap::new().with(IMAGE_KEY, NdArray::from_u8(vec![v; 3 * 64], &[1, 64, 3]));
        let batch = m.infer_batch(vec![frame(1), frame(2), frame(1)]).await;
        assert_eq!(batch.len(), 3);
        assert_eq!(batch[0], batch[2], "same frame, same answer");
        assert_ne!(batch[0], batch[1], "another frame, another answer");
        assert_eq!(batch[0], SimModel::answer(m.checksum(&frame(1))));
    }
}
