"""LeRobot 0.4.4's real ``PolicyServer`` (``lerobot.async_inference``), traced
with ``stagetrace.lerobot`` as docs/lerobot.md says, in a process of its
own as a robot meets it (no GIL shared with the robot), served as
LeRobot's ``serve()`` serves it but with the worker count and queue
timeout given.

``python lerobot_real_serve.py WORKERS OBS_QUEUE_TIMEOUT_S``
(run from a scratch directory: LeRobot's modules write ``logs/`` there)
prints ``listening <port>``, serves until a line arrives on stdin, then
prints the server's truth (``lerobot_real.Witnessed``) as one JSON line.

The class served is a subclass that only stamps, then hands each call to
LeRobot's own method: when LeRobot's ``SendObservations`` first asked the
stream for a chunk and when it had the chunk marked ``TRANSFER_END`` (the
stream's reading), what ``_enqueue_observation`` decided and which
observation ``_predict_action_chunk`` ran. The call's way to the
handler is the test's own ``ArrivalWitness``'s: its arrival (an
interceptor, in grpcio's serving thread as the call comes in), its
hand-over to the pool (the server's pool), and the handler's start (where
grpcio, in a worker of the pool, calls the method registered for
``SendObservations``, around what ``trace_policy_server`` registered).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import grpc  # noqa: E402
import torch  # noqa: E402
from lerobot.async_inference.configs import PolicyServerConfig  # noqa: E402
from lerobot.async_inference.policy_server import PolicyServer  # noqa: E402
from lerobot.transport import services_pb2, services_pb2_grpc  # noqa: E402
from lerobot_peers import ArrivalWitness  # noqa: E402
from lerobot_real import Observed, Witnessed, trace_id  # noqa: E402

from stagetrace.lerobot import trace_policy_server  # noqa: E402


class _ReadWitness:
    """The stream as LeRobot's handler reads it: when it first asked for a
    chunk, and when it had the one marked ``TRANSFER_END``."""

    def __init__(self, inner: Any, seen: Observed) -> None:
        self._inner = inner
        self._seen = seen

    def __iter__(self) -> _ReadWitness:
        return self

    def __next__(self) -> Any:
        if self._seen.read_start is None:
            self._seen.read_start = time.perf_counter_ns()
        item = next(self._inner)
        if getattr(item, "transfer_state", None) == services_pb2.TRANSFER_END:
            self._seen.read_end = time.perf_counter_ns()
        return item


class WitnessedPolicyServer(PolicyServer):
    """LeRobot's ``PolicyServer``, stamped where its methods start."""

    def __init__(self, config: PolicyServerConfig, witness: ArrivalWitness) -> None:
        super().__init__(config)
        self.witness = witness
        self.truth = Witnessed()

    def SendObservations(self, request_iterator: Any, context: Any) -> Any:  # noqa: N802
        seen = self.truth.started(trace_id(dict(context.invocation_metadata() or ()).get("traceparent")))
        seen.came, seen.pooled = self.witness.pop(context), self.witness.pop_pooled(context)
        seen.entered = self.witness.pop_entered()
        return super().SendObservations(_ReadWitness(request_iterator, seen), context)

    def _enqueue_observation(self, obs: Any) -> bool:
        queued = super()._enqueue_observation(obs)
        self.truth.queued(obs, queued)
        return queued

    def _predict_action_chunk(self, observation_t: Any) -> Any:
        self.truth.ran(observation_t)
        return super()._predict_action_chunk(observation_t)


def main(argv: list[str]) -> int:
    workers, timeout_s = int(argv[0]), float(argv[1])
    # The policy on one core: the robot's process and this one share the
    # machine's two.
    torch.set_num_threads(1)
    witness = ArrivalWitness()
    # No inference_latency padding: GetActions returns as soon as its chunk
    # is ready (LeRobot's default pads it to 1/30 s).
    config = PolicyServerConfig(host="127.0.0.1", port=8080, obs_queue_timeout=timeout_s, inference_latency=0.0)
    server = trace_policy_server(WitnessedPolicyServer(config, witness))  # docs/lerobot.md's line
    server.SendObservations = witness.entry(server.SendObservations)
    grpc_server = grpc.server(witness.pool(workers), interceptors=[witness])
    services_pb2_grpc.add_AsyncInferenceServicer_to_server(server, grpc_server)
    port = grpc_server.add_insecure_port("127.0.0.1:0")
    grpc_server.start()
    print(f"listening {port}", flush=True)
    sys.stdin.readline()
    grpc_server.stop(grace=None)
    server.stop()
    print(json.dumps(server.truth.as_json()), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
