"""A LeRobot-style policy server and robot client for the tests, on LeRobot's
own gRPC definitions (``lerobot.transport.services_pb2*`` from the ``lerobot``
wheel, installed without its torch dependencies).

They behave as LeRobot 0.4's ``PolicyServer`` and ``RobotClient`` do — the
same attribute and method names, so ``stagetrace.lerobot`` traces them as it
traces LeRobot's: observations streamed in chunks up to ``TRANSFER_END``,
a one-slot queue where a newer observation replaces the waiting one, an
observation skipped when its timestep was predicted already or its state is
within ``atol`` of the last one run, the policy run inside ``GetActions``
and padded to ``inference_latency``, and a robot that executes one action
per tick and sends an observation when its action queue is at or below
``chunk_size_threshold`` of a chunk. Each side also writes down what it did,
stamped where it did it: the truth the records are checked against.
"""

from __future__ import annotations

import dataclasses
import pickle  # nosec B403 - the tests' own objects, as LeRobot pickles its own
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from queue import Empty, Queue
from typing import Any

import grpc
from lerobot.transport import services_pb2, services_pb2_grpc

from stagetrace.grpc import ArrivalStamped

CHUNK_BYTES = 2 * 1024 * 1024


@dataclasses.dataclass
class TimedObservation:
    timestamp: float
    timestep: int
    observation: dict[str, Any]
    must_go: bool = False

    def get_timestep(self) -> int:
        return self.timestep

    def get_timestamp(self) -> float:
        return self.timestamp

    def get_observation(self) -> dict[str, Any]:
        return self.observation


@dataclasses.dataclass
class TimedAction:
    timestamp: float
    timestep: int
    action: list[float]

    def get_timestep(self) -> int:
        return self.timestep

    def get_action(self) -> list[float]:
        return self.action


def _serial(obs: TimedObservation) -> int:
    return int(obs.get_observation()["serial"])


def chunks(data: bytes) -> Iterator[services_pb2.Observation]:
    """``data`` as LeRobot streams it: BEGIN, MIDDLE…, END (one chunk: END)."""
    sent = 0
    while sent < len(data):
        if sent + CHUNK_BYTES >= len(data):
            state = services_pb2.TRANSFER_END
        elif sent == 0:
            state = services_pb2.TRANSFER_BEGIN
        else:
            state = services_pb2.TRANSFER_MIDDLE
        yield services_pb2.Observation(transfer_state=state, data=data[sent : sent + CHUNK_BYTES])
        sent += CHUNK_BYTES


def until_end(iterator: Any) -> bytes:
    """The bytes of one observation; returns at ``TRANSFER_END``, before
    the stream's own end, as LeRobot's receiver does."""
    buf = bytearray()
    for item in iterator:
        if item.transfer_state == services_pb2.TRANSFER_BEGIN:
            buf = bytearray(item.data)
        else:
            buf += item.data
        if item.transfer_state == services_pb2.TRANSFER_END:
            return bytes(buf)
    raise ValueError("stream ended before TRANSFER_END")


@dataclasses.dataclass
class ServerTruth:
    """What the server did with each observation (keyed by the serial the
    robot gave it: timesteps repeat), on its ``perf_counter_ns``."""

    timestep: dict[int, int] = dataclasses.field(default_factory=dict)
    # SendObservations' call arrived (grpcio's serving thread, before the
    # pool; where a test's own interceptor stamps it: ArrivalWitness).
    came: dict[int, int] = dataclasses.field(default_factory=dict)
    # The serving thread handed the call to the pool; grpcio called the
    # registered method in a worker (ArrivalWitness: pool, entry).
    pooled: dict[int, int] = dataclasses.field(default_factory=dict)
    entered: dict[int, int] = dataclasses.field(default_factory=dict)
    # SendObservations' handler started (a worker of the pool took the call).
    started: dict[int, int] = dataclasses.field(default_factory=dict)
    arrived: dict[int, int] = dataclasses.field(default_factory=dict)
    outcome: dict[int, str] = dataclasses.field(default_factory=dict)
    enqueued: dict[int, int] = dataclasses.field(default_factory=dict)
    dequeued: dict[int, int] = dataclasses.field(default_factory=dict)
    model: dict[int, tuple[int, int]] = dataclasses.field(default_factory=dict)
    ready: dict[int, int] = dataclasses.field(default_factory=dict)
    replied: dict[int, int] = dataclasses.field(default_factory=dict)


class ArrivalWitness(grpc.ServerInterceptor):
    """The test's own stamps of each call on its way to the handler, around
    stagetrace's own (which it never replaces):

    - ``came``: grpcio runs a server interceptor in its serving thread as
      the call comes in, before the call waits for a worker;
    - ``pooled``: the serving thread hands the call to the thread pool
      (:meth:`pool`), after it asked the handler for a pool of its own,
      where ``stagetrace.grpc.ArrivalStamped`` stamps the arrival;
    - ``entered``: grpcio calls the registered method in a worker
      (:meth:`entry` around it), before stagetrace's pickup.

    So stagetrace's arrival lies between ``came`` and ``pooled``, its pickup
    after ``entered``, whatever a thread lost on the way. ``came`` and
    ``pooled`` are keyed by the call's ``traceparent`` (each observation
    sends its own), ``entered`` is the worker's until its handler takes it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._came: dict[str, int] = {}
        self._pooled: dict[str, int] = {}
        self._local = threading.local()
        #: Set on each stamp (a test may wait for a call to be in).
        self.seen = threading.Event()

    def intercept_service(self, continuation: Any, details: Any) -> Any:
        now = time.perf_counter_ns()
        tp = dict(details.invocation_metadata or ()).get("traceparent")
        if tp is not None:
            with self._lock:
                self._came[tp] = now
            self.seen.set()
        return continuation(details)

    def pool(self, max_workers: int) -> futures.ThreadPoolExecutor:
        """The server's thread pool, stamping each call handed to it."""
        witness = self

        class Pool(futures.ThreadPoolExecutor):
            def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
                now = time.perf_counter_ns()
                # grpcio's _handle_*: (context.run, behavior-in-pool, rpc_event, ...).
                metadata = getattr(args[1], "invocation_metadata", None) if len(args) > 1 else None
                tp = dict(metadata or ()).get("traceparent")
                if tp is not None:
                    with witness._lock:
                        witness._pooled[tp] = now
                return super().submit(fn, *args, **kwargs)

        return Pool(max_workers=max_workers)

    def entry(self, registered: Any) -> Any:
        """``registered`` (a request-streaming method) stamped as grpcio calls
        it in a worker. An ``ArrivalStamped`` itself, so grpcio's question
        for a thread pool reaches stagetrace's as it would without it."""
        witness = self

        class Entry(ArrivalStamped):
            __slots__ = ()

            def __call__(self, request_iterator: Any, context: Any) -> Any:
                witness._local.entered = time.perf_counter_ns()
                return super().__call__(request_iterator, context)

        return Entry(registered)

    def pop(self, context: Any) -> int | None:
        """The call's ``came``."""
        tp = dict(context.invocation_metadata() or ()).get("traceparent")
        with self._lock:
            return self._came.pop(tp, None) if tp is not None else None

    def pop_pooled(self, context: Any) -> int | None:
        """The call's ``pooled``."""
        tp = dict(context.invocation_metadata() or ()).get("traceparent")
        with self._lock:
            return self._pooled.pop(tp, None) if tp is not None else None

    def pop_entered(self) -> int | None:
        """This worker's ``entered``, for the call its handler runs now."""
        return self._local.__dict__.pop("entered", None)


class PolicyServer(services_pb2_grpc.AsyncInferenceServicer):
    """LeRobot 0.4's policy server, with a model that takes ``model_s``."""

    def __init__(
        self,
        *,
        model_s: float,
        chunk_size: int,
        dt_s: float,
        inference_latency_s: float = 0.0,
        atol: float = 1.0,
        obs_queue_timeout_s: float = 0.5,
    ) -> None:
        self.model_s = model_s
        self.chunk_size = chunk_size
        self.dt_s = dt_s
        self.inference_latency_s = inference_latency_s
        self.atol = atol
        self.obs_queue_timeout_s = obs_queue_timeout_s
        self.truth = ServerTruth()
        #: Stamps each call's arrival, when the test serves with one.
        self.witness: ArrivalWitness | None = None
        self._predicting: int | None = None
        self._reset_server()

    def _loads(self, data: bytes) -> TimedObservation:
        """An observation off the wire: LeRobot pickles its own."""
        return pickle.loads(data)  # nosec B301

    def _dumps(self, chunk: list[TimedAction]) -> bytes:
        return pickle.dumps(chunk)

    def _reset_server(self) -> None:
        self.observation_queue: Queue = Queue(maxsize=1)
        self.last_processed_obs: TimedObservation | None = None
        self._predicted_timesteps_lock = threading.Lock()
        self._predicted_timesteps: set[int] = set()

    def Ready(self, request: Any, context: Any) -> Any:  # noqa: N802
        self._reset_server()
        return services_pb2.Empty()

    def SendPolicyInstructions(self, request: Any, context: Any) -> Any:  # noqa: N802
        return services_pb2.Empty()

    def SendObservations(self, request_iterator: Any, context: Any) -> Any:  # noqa: N802
        started = time.perf_counter_ns()
        entered = self.witness.pop_entered() if self.witness is not None else None
        data = until_end(request_iterator)
        arrived = time.perf_counter_ns()
        obs = self._loads(data)
        self.truth.started[_serial(obs)] = started
        if self.witness is not None:
            for stamps, at in (
                (self.truth.came, self.witness.pop(context)),
                (self.truth.pooled, self.witness.pop_pooled(context)),
                (self.truth.entered, entered),
            ):
                if at is not None:
                    stamps[_serial(obs)] = at
        self.truth.timestep[_serial(obs)] = obs.get_timestep()
        self.truth.arrived[_serial(obs)] = arrived
        self._enqueue_observation(obs)
        return services_pb2.Empty()

    def _similar(self, a: TimedObservation, b: TimedObservation) -> bool:
        sa, sb = a.get_observation()["state"], b.get_observation()["state"]
        return max(abs(x - y) for x, y in zip(sa, sb)) <= self.atol

    def _obs_sanity_checks(self, obs: TimedObservation, previous: TimedObservation) -> bool:
        with self._predicted_timesteps_lock:
            if obs.get_timestep() in self._predicted_timesteps:
                self.truth.outcome[_serial(obs)] = "skipped_predicted"
                return False
        if self._similar(obs, previous):
            self.truth.outcome[_serial(obs)] = "skipped_similar"
            return False
        return True

    def _enqueue_observation(self, obs: TimedObservation) -> bool:
        if obs.must_go or self.last_processed_obs is None or self._obs_sanity_checks(obs, self.last_processed_obs):
            if self.observation_queue.full():
                old = self.observation_queue.get_nowait()
                self.truth.outcome[_serial(old)] = "replaced"
            self.truth.enqueued[_serial(obs)] = time.perf_counter_ns()
            self.truth.outcome[_serial(obs)] = "queued"
            self.observation_queue.put(obs)
            return True
        return False

    def GetActions(self, request: Any, context: Any) -> Any:  # noqa: N802
        start = time.perf_counter()
        try:
            obs = self.observation_queue.get(timeout=self.obs_queue_timeout_s)
        except Empty:
            return services_pb2.Empty()
        serial = _serial(obs)
        self.truth.dequeued[serial] = time.perf_counter_ns()
        with self._predicted_timesteps_lock:
            self._predicted_timesteps.add(obs.get_timestep())
        chunk = self._predict_action_chunk(obs)
        data = self._dumps(chunk)
        time.sleep(max(0.0, self.inference_latency_s - (time.perf_counter() - start)))
        self.truth.replied[serial] = time.perf_counter_ns()
        return services_pb2.Actions(data=data)

    def _get_action_chunk(self, observation: dict[str, Any]) -> list[list[float]]:
        start = time.perf_counter_ns()
        time.sleep(self.model_s)
        out = [[float(observation["state"][0]) + i] for i in range(self.chunk_size)]
        self.truth.model[self._predicting] = (start, time.perf_counter_ns())  # type: ignore[index]
        return out

    def _predict_action_chunk(self, obs: TimedObservation) -> list[TimedAction]:
        self._predicting = _serial(obs)
        prepared = dict(obs.get_observation())
        self.last_processed_obs = obs
        actions = self._get_action_chunk(prepared)
        chunk = [
            TimedAction(obs.get_timestamp() + i * self.dt_s, obs.get_timestep() + i, a) for i, a in enumerate(actions)
        ]
        self.truth.ready[_serial(obs)] = time.perf_counter_ns()
        return chunk


@dataclasses.dataclass
class RobotTruth:
    """What the robot did, on its ``perf_counter_ns``."""

    # serial -> capture's start and end.
    captured: dict[int, tuple[int, int]] = dataclasses.field(default_factory=dict)
    # serial -> the observation handed to grpc (SendObservations called).
    handed: dict[int, int] = dataclasses.field(default_factory=dict)
    chunk_in: dict[int, int] = dataclasses.field(default_factory=dict)
    # timestep of an action -> when it was executed.
    executed: dict[int, int] = dataclasses.field(default_factory=dict)
    # chunk (its first timestep) -> (actions left when it came, idle ticks just before it).
    queue_at_arrival: dict[int, tuple[int, int]] = dataclasses.field(default_factory=dict)
    idle_ticks: int = 0
    chunks_received: int = 0


class Robot:
    """A robot whose state moves by ``step`` per action executed (so
    successive observations differ, or not, as a test wants)."""

    def __init__(self, step: float) -> None:
        self.state = 0.0
        self.step = step

    def get_observation(self) -> dict[str, Any]:
        return {"state": [self.state, 0.0]}

    def send_action(self, action: list[float]) -> None:
        self.state += self.step


@dataclasses.dataclass
class ClientConfig:
    environment_dt: float
    fps: int


class RobotClient:
    """LeRobot 0.4's robot client (no cameras, no draccus): the control loop
    and the action receiver, on threads of its own."""

    def __init__(self, channel: Any, server_address: str, *, dt_s: float, chunk_size: int, threshold: float, step: float) -> None:
        self.config = ClientConfig(environment_dt=dt_s, fps=round(1 / dt_s))
        self.server_address = server_address
        self.channel = channel
        self.stub = services_pb2_grpc.AsyncInferenceStub(channel)
        self.robot = Robot(step)
        self.shutdown_event = threading.Event()
        self.latest_action_lock = threading.Lock()
        self.latest_action = -1
        self.action_chunk_size = chunk_size
        self._chunk_size_threshold = threshold
        self.action_queue: Queue = Queue()
        self.action_queue_lock = threading.Lock()
        self.must_go = threading.Event()
        self.must_go.set()
        self.truth = RobotTruth()
        self._serial = 0

    def _dumps_obs(self, obs: TimedObservation) -> bytes:
        """An observation onto the wire: LeRobot pickles its own."""
        return pickle.dumps(obs)

    def _loads_chunk(self, data: bytes) -> list[TimedAction]:
        return pickle.loads(data)  # nosec B301

    @property
    def running(self) -> bool:
        return not self.shutdown_event.is_set()

    def start(self) -> None:
        self.stub.Ready(services_pb2.Empty())
        self.stub.SendPolicyInstructions(services_pb2.PolicySetup(data=b""))

    def stop(self) -> None:
        self.shutdown_event.set()

    def send_observation(self, obs: TimedObservation) -> bool:
        data = self._dumps_obs(obs)
        self.truth.handed[int(obs.get_observation()["serial"])] = time.perf_counter_ns()
        self.stub.SendObservations(chunks(data))
        return True

    def receive_actions(self) -> None:
        while self.running:
            try:
                reply = self.stub.GetActions(services_pb2.Empty())
            except grpc.RpcError:
                # LeRobot's receiver logs and goes on; at shutdown the
                # channel's calls are cancelled.
                if not self.running:
                    return
                raise
            if not reply.data:
                continue
            now = time.perf_counter_ns()
            chunk = self._loads_chunk(reply.data)
            first = chunk[0].get_timestep()
            with self.action_queue_lock:
                left = self.action_queue.qsize()
            self.truth.chunk_in[first] = now
            self.truth.queue_at_arrival[first] = (left, self.truth.idle_ticks if left == 0 else 0)
            self._aggregate(chunk)
            self.truth.chunks_received += 1
            self.must_go.set()

    def _aggregate(self, chunk: list[TimedAction]) -> None:
        with self.latest_action_lock:
            latest = self.latest_action
        with self.action_queue_lock:
            current = {a.get_timestep(): a for a in self.action_queue.queue}
            fresh: Queue = Queue()
            for a in chunk:
                if a.get_timestep() <= latest:
                    continue
                fresh.put(a)
            for ts, a in sorted(current.items()):
                if ts not in {b.get_timestep() for b in chunk}:
                    fresh.put(a)
            self.action_queue = fresh

    def actions_available(self) -> bool:
        with self.action_queue_lock:
            return not self.action_queue.empty()

    def control_loop_action(self) -> Any:
        with self.action_queue_lock:
            action = self.action_queue.get_nowait()
        self.robot.send_action(action.get_action())
        self.truth.executed[action.get_timestep()] = time.perf_counter_ns()
        self.truth.idle_ticks = 0
        with self.latest_action_lock:
            self.latest_action = action.get_timestep()
        return action

    def _ready_to_send_observation(self) -> bool:
        with self.action_queue_lock:
            return self.action_queue.qsize() / self.action_chunk_size <= self._chunk_size_threshold

    def control_loop_observation(self) -> TimedObservation:
        start = time.perf_counter_ns()
        raw = dict(self.robot.get_observation(), serial=self._serial)
        self._serial += 1
        with self.latest_action_lock:
            ts = max(self.latest_action, 0)
        obs = TimedObservation(time.time(), ts, raw)
        with self.action_queue_lock:
            obs.must_go = self.must_go.is_set() and self.action_queue.empty()
        self.truth.captured[self._serial - 1] = (start, time.perf_counter_ns())
        self.send_observation(obs)
        if obs.must_go:
            self.must_go.clear()
        return obs

    def control_loop(self, ticks: int, *, observe: bool = True, until: Any = None) -> None:
        """``ticks`` control ticks at most; with ``observe=False`` no new
        observation is sent (the robot drains what is in flight), and the
        loop ends early once ``until()`` says so."""
        for _ in range(ticks):
            if until is not None and until():
                return
            tick = time.perf_counter()
            if self.actions_available():
                self.control_loop_action()
            else:
                self.truth.idle_ticks += 1
            if observe and self._ready_to_send_observation():
                self.control_loop_observation()
            time.sleep(max(0.0, self.config.environment_dt - (time.perf_counter() - tick)))
