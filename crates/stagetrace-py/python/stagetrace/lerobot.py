"""stagetrace for LeRobot's async inference (``RobotClient`` ↔ ``PolicyServer``
over gRPC, ``transport.AsyncInference``), LeRobot 0.4.

LeRobot streams each observation to the policy server
(``SendObservations``), the server keeps at most one (a newer one replaces
it; one too similar to the last one run, or of a timestep already
predicted, is skipped), runs the policy when the robot's ``GetActions``
asks, and the robot merges the chunk into its action queue and executes one
action per control tick. Here each observation that became a chunk is one
record, keyed by its timestep (the record's ``seq``):

capture → uplink (LeRobot hands the observation's stream to gRPC → the
server had the whole observation; ``tx_wait`` its part until grpcio took
the first chunk; LeRobot's pickling before the hand-over is the robot's,
outside the stages) →
queue (``accept_wait``: the call waited for a worker of the server's pool,
which LeRobot's ``GetActions`` holds while it waits for an observation;
then waiting in the one-slot queue, for the robot's poll included) → infer (pre-process, model, post-process) → poll_wait (the chunk
ready → the reply sent: serialisation and LeRobot's ``inference_latency``
padding) → downlink → dispatch (the reply in → the chunk's first action
executed), with ``margin_ms`` (how long the action queue would have lasted
when the chunk arrived; negative: it had run dry that long) and
``dry_ticks`` (control ticks without an action before it). An observation
that never became a chunk is a failed call with the reason (``replaced``,
``skipped``, ``cancelled``, ``disconnected``, ``exception``), counted,
never silently gone. The server's clock is placed on
the robot's by each exchange, as for any call.

Two lines on each side::

    client = RobotClient(cfg)
    stagetrace.lerobot.trace_robot_client(client)     # before client.start()

    server = PolicyServer(cfg)
    stagetrace.lerobot.trace_policy_server(server)    # before serving it

Or no change to LeRobot at all:
``python -m stagetrace.lerobot lerobot.async_inference.robot_client --robot.type=…``
(the same for ``…policy_server``) runs LeRobot's own module with both
classes traced.
"""

from __future__ import annotations

import contextvars
import logging
import threading
import time
from collections.abc import Callable, Sequence
from queue import Queue
from typing import Any

import grpc

from . import _host
from ._counters import _COUNTERS
from .codec import packb, unpackb
from .grpc import (
    TIMING_KEY,
    ArrivalStamped,
    FirstTaken,
    _Arrival,
    arrival_of,
    messages_of,
    timing_of,
    with_receive,
    with_trace,
)
from .timer import RequestTimer

__all__ = ["OUTCOME_KEY", "trace_policy_server", "trace_robot_client"]

logger = logging.getLogger("stagetrace")

#: Trailing metadata key of ``SendObservations``: what the server did with
#: the observation (msgpack map: ``obs`` = ``queued`` / ``skipped_similar``
#: / ``skipped_predicted``, ``timestep``, and ``replaced``: the timestep of
#: the queued observation this one pushed out).
OUTCOME_KEY = "stagetrace-obs-bin"


# --------------------------------------------------------------------------
# Policy server.


class _ServerTrace:
    """What the traced server keeps per observation in flight."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        # timestep -> the observation's timer (receive → reply sent) and
        # the timing map's keys for its receive stamp (the wait for a worker).
        self.timers: dict[int, tuple[RequestTimer, dict[str, Any]]] = {}
        # SendObservations thread -> the queued observation it replaced.
        self.replacing = threading.local()
        # GetActions thread -> the timestep it is answering.
        self.serving = threading.local()


class _TracedQueue(Queue):
    """LeRobot's one-slot observation queue, telling a replacement (a
    ``get_nowait`` made while enqueueing) from the policy's take."""

    def __init__(self, trace: _ServerTrace, maxsize: int = 1) -> None:
        super().__init__(maxsize=maxsize)
        self._trace = trace

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        obs = super().get(block, timeout)
        replacing = self._trace.replacing
        if getattr(replacing, "active", False):
            replacing.timestep = _timestep(obs)
        else:
            self._trace.serving.timestep = _timestep(obs)
        return obs


#: ``transport.TransferState.TRANSFER_END`` (LeRobot's services.proto).
_TRANSFER_END = 3


def _transfer_end(message: Any) -> bool:
    return getattr(message, "transfer_state", None) == _TRANSFER_END


def _timestep(obs: Any) -> int | None:
    try:
        return int(obs.get_timestep())
    except Exception:  # noqa: BLE001 - a foreign object: no timestep
        return None


def _set_trailer(context: grpc.ServicerContext, key: str, value: dict[str, Any]) -> None:
    try:
        existing = tuple(context.trailing_metadata() or ()) if hasattr(context, "trailing_metadata") else ()
        kept = tuple((k, v) for k, v in existing if k != key)
        context.set_trailing_metadata(kept + ((key, packb(value)),))
    except Exception:  # noqa: BLE001 - never fail LeRobot's request over timing
        _COUNTERS.add("timing_errors")


def trace_policy_server(server: Any) -> Any:
    """Trace a LeRobot ``PolicyServer`` (before it serves): each observation
    is timed from its arrival to the reply that carries its chunk, and the
    robot learns what happened to every observation. Returns ``server``."""
    trace = _ServerTrace()
    server.observation_queue = _TracedQueue(trace)
    cls_send = type(server).SendObservations
    cls_get = type(server).GetActions
    cls_enqueue = type(server)._enqueue_observation
    cls_predict = type(server)._predict_action_chunk
    cls_model = type(server)._get_action_chunk
    cls_reset = type(server)._reset_server

    def send_observations(request_iterator: Any, context: grpc.ServicerContext) -> Any:
        # LeRobot's receiver returns at the chunk marked TRANSFER_END,
        # before the stream's own end: the observation has arrived there.
        # The call's arrival, stamped before it waited for a worker
        # (ArrivalStamped below): a busy pool is the server's queue.
        arrival = _Arrival(
            request_iterator,
            context.invocation_metadata(),
            _transfer_end,
            arrived=arrival_of(request_iterator),
            messages=messages_of(request_iterator),
        )
        outcome: dict[str, Any] = {}
        trace.replacing.outcome = outcome
        trace.replacing.arrival = arrival
        try:
            # In a context of its own: the timer the arrival sets ends with
            # this request.
            return contextvars.copy_context().run(cls_send, server, arrival, context)
        finally:
            trace.replacing.outcome = None
            if outcome:
                _set_trailer(context, OUTCOME_KEY, outcome)
            # The worker goes back to wait for its next request (the next
            # observation's wait for a core is counted from here).
            _host.mark_idle()

    def enqueue(obs: Any) -> bool:
        ts = _timestep(obs)
        with server._predicted_timesteps_lock:
            predicted = ts in server._predicted_timesteps
        replacing = trace.replacing
        replacing.active, replacing.timestep = True, None
        try:
            queued = cls_enqueue(server, obs)
        finally:
            replacing.active = False
        outcome = getattr(replacing, "outcome", None)
        arrival = getattr(replacing, "arrival", None)
        if outcome is not None:
            outcome["timestep"] = ts
            outcome["obs"] = "queued" if queued else ("skipped_predicted" if predicted else "skipped_similar")
            if replacing.timestep is not None:
                outcome["replaced"] = replacing.timestep
        with trace.lock:
            if replacing.timestep is not None:
                trace.timers.pop(replacing.timestep, None)
            if queued and ts is not None and arrival is not None and arrival.timer is not None:
                trace.timers[ts] = (arrival.timer, arrival.extra)
        return queued

    def predict(obs: Any) -> Any:
        t = _timer_for(_timestep(obs))
        start = time.perf_counter_ns()
        trace.serving.model = None
        try:
            return cls_predict(server, obs)
        finally:
            end = time.perf_counter_ns()
            model = getattr(trace.serving, "model", None)
            if t is not None:
                if model is None:
                    t._add("infer", start, end)
                else:
                    t._add("pre", start, model[0])
                    t._add("infer", model[0], model[1])
                    t._add("post", model[1], end)
                trace.serving.ready = end

    def model(observation: Any) -> Any:
        start = time.perf_counter_ns()
        try:
            return cls_model(server, observation)
        finally:
            trace.serving.model = (start, time.perf_counter_ns())

    def get_actions(request: Any, context: grpc.ServicerContext) -> Any:
        trace.serving.timestep = None
        trace.serving.ready = None
        try:
            reply = cls_get(server, request, context)
        finally:
            # GetActions' own run-queue waits (its polling, the inference)
            # are not the next request's wait for a core.
            _host.mark_idle()
        ts = trace.serving.timestep
        popped = _timer_pop(ts)
        if popped is not None:
            t, extra = popped
            timing = with_receive(t.server_timing(), extra)
            ready = trace.serving.ready
            if ready is not None:
                # Ends where total_ns does (the reply's send stamp).
                timing["poll_wait_ns"] = max(0, t.arrival_ns + timing["total_ns"] - ready)
            timing["timestep"] = ts
            _set_trailer(context, TIMING_KEY, timing)
            t.sent()
        return reply

    def reset() -> None:
        cls_reset(server)
        server.observation_queue = _TracedQueue(trace)
        with trace.lock:
            trace.timers.clear()

    def _timer_for(ts: int | None) -> RequestTimer | None:
        with trace.lock:
            entry = trace.timers.get(ts) if ts is not None else None
        return entry[0] if entry is not None else None

    def _timer_pop(ts: int | None) -> tuple[RequestTimer, dict[str, Any]] | None:
        with trace.lock:
            return trace.timers.pop(ts, None) if ts is not None else None

    server.SendObservations = ArrivalStamped(send_observations)
    server.GetActions = get_actions
    server._enqueue_observation = enqueue
    server._predict_action_chunk = predict
    server._get_action_chunk = model
    server._reset_server = reset
    return server


# --------------------------------------------------------------------------
# Robot client.


class _Pending:
    """One observation sent and waiting for its chunk. Its transport stage
    (the uplink's start) begins where LeRobot hands the observation to
    gRPC (:class:`_RobotInterceptor`), not before LeRobot serialises it."""

    __slots__ = ("call", "transport", "dispatch")

    def __init__(self, call: Any) -> None:
        self.call = call
        self.transport: Any = None
        self.dispatch: Any = None


class _RobotTrace:
    def __init__(self, recorder: Any, peer: str, dt_s: float) -> None:
        self.recorder = recorder
        self.peer = peer
        self.dt_ns = int(dt_s * 1e9)
        self.lock = threading.Lock()
        self.capturing: Any = None
        self.sending: _Pending | None = None
        self.sent_outcome: dict[str, Any] | None = None
        # timestep -> observations sent and queued, oldest first: a must-go
        # observation can repeat the timestep of one still being predicted.
        self.in_flight: dict[int, list[_Pending]] = {}
        # Chunks in, waiting for their first action: (first timestep, pending).
        self.dispatching: list[tuple[int, _Pending]] = []
        self.dry_since: int | None = None
        self.dry_ticks = 0
        # Set by the client's stop(): what is still open then is closed as
        # cancelled, and so is a reply that comes in after it.
        self.stopped = False

    def cancel_open(self) -> None:
        """The robot stopped: every observation still waiting for its chunk,
        and every chunk whose first action was never executed, ends as a
        failed record (``cancelled``) — counted, never silently gone."""
        with self.lock:
            self.stopped = True
            open_calls = [p for ps in self.in_flight.values() for p in ps] + [p for _, p in self.dispatching]
            self.in_flight.clear()
            self.dispatching.clear()
        for pending in open_calls:
            _give_up(pending, "cancelled")


class _RobotInterceptor(grpc.UnaryUnaryClientInterceptor, grpc.StreamUnaryClientInterceptor):
    def __init__(self, trace: _RobotTrace, client: Any) -> None:
        self._trace = trace
        self._client = client

    def intercept_stream_unary(self, continuation: Callable, details: Any, request_iterator: Any) -> Any:
        pending = self._trace.sending
        if pending is None or pending.transport is not None or not details.method.endswith("/SendObservations"):
            return continuation(details, request_iterator)
        # The uplink starts here: the observation's stream is handed to gRPC
        # (LeRobot's pickling and logging before it are the robot's, not the
        # link's). tx_wait: the robot's own time from here until grpcio took
        # the observation's first chunk (its C core writes it from there,
        # GIL or not).
        pending.transport = pending.call.transport(self._trace.peer)
        handed = FirstTaken(request_iterator)
        outcome = continuation(with_trace(details, pending.transport.traceparent()), handed)
        handed.hand_to(pending.transport)
        if outcome.exception() is None:
            raw = _md(outcome.trailing_metadata(), OUTCOME_KEY)
            try:
                said = unpackb(bytes(raw)) if raw is not None else None
            except Exception:  # noqa: BLE001 - a peer's bytes never raise into LeRobot
                said = None
            self._trace.sent_outcome = said if isinstance(said, dict) else None
        return outcome

    def intercept_unary_unary(self, continuation: Callable, details: Any, request: Any) -> Any:
        outcome = continuation(details, request)
        if not details.method.endswith("/GetActions") or outcome.exception() is not None:
            return outcome
        # The reply (and its trailers) are in: the transport stage of the
        # observation it answers ends here.
        timing = timing_of(outcome.trailing_metadata())
        ts = timing.get("timestep") if timing is not None else None
        with self._trace.lock:
            # A reply answers the oldest observation of its timestep.
            pending = _take(self._trace.in_flight, ts, 0) if isinstance(ts, int) else None
        if pending is None:
            return outcome
        pending.transport.server_timing(timing)
        pending.transport.close()
        _action_queue_state(self._trace, self._client, pending.call)
        pending.dispatch = pending.call.stage("dispatch")
        with self._trace.lock:
            late = self._trace.stopped
            if not late:
                self._trace.dispatching.append((ts, pending))
        if late:
            _give_up(pending, "cancelled")
        return outcome


def _md(metadata: Sequence[tuple[str, Any]] | None, key: str) -> Any:
    for k, v in metadata or ():
        if k == key:
            return v
    return None


def _action_queue_state(trace: _RobotTrace, client: Any, call: Any) -> None:
    """The margin the chunk arrived with: how long the action queue would
    still have lasted (its actions × the control period), or, when it had
    run dry, how long ago that was (negative), with the idle ticks."""
    with client.action_queue_lock:
        left = client.action_queue.qsize()
    now = time.perf_counter_ns()
    with trace.lock:
        if left > 0:
            margin, ticks = left * trace.dt_ns, 0
        elif trace.dry_since is not None:
            margin, ticks = -(now - trace.dry_since), trace.dry_ticks
        else:
            margin, ticks = 0, 0
    call.action_queue(margin, ticks)


def trace_robot_client(client: Any, recorder: Any = None) -> Any:
    """Trace a LeRobot ``RobotClient`` (after it is built, before
    ``start()``): one call per observation, ending when the first action of
    its chunk is executed. ``recorder`` defaults to the process's
    (``stagetrace.init``). Returns ``client``."""
    from . import recorder as process_recorder

    rec = recorder if recorder is not None else process_recorder()
    trace = _RobotTrace(rec, f"grpc://{client.server_address}", float(client.config.environment_dt))
    client.channel = grpc.intercept_channel(client.channel, _RobotInterceptor(trace, client))
    stub_type = type(client.stub)
    client.stub = stub_type(client.channel)

    robot_observe = client.robot.get_observation
    cls_send = type(client).send_observation
    cls_act = type(client).control_loop_action
    cls_available = type(client).actions_available
    cls_stop = type(client).stop

    def get_observation(*args: Any, **kwargs: Any) -> Any:
        call = rec.call("lerobot")
        capture = call.stage("capture")
        try:
            return robot_observe(*args, **kwargs)
        except BaseException:
            capture.fail("exception")
            call.close(True)
            raise
        finally:
            capture.close()
            trace.capturing = call

    def send_observation(obs: Any) -> bool:
        call, trace.capturing = trace.capturing, None
        if call is None:
            call = rec.call("lerobot")
        ts = _timestep(obs)
        if ts is not None:
            call.set_seq(ts)
        pending = _Pending(call)
        trace.sending, trace.sent_outcome = pending, None
        try:
            ok = cls_send(client, obs)
        except BaseException:
            # LeRobot's send raised (it logs and goes on): the record says
            # so, and says the robot stopped when that is why it refused.
            stopping = trace.stopped or getattr(client, "running", True) is False
            _give_up(pending, "cancelled" if stopping else "exception")
            raise
        finally:
            trace.sending = None
        said = trace.sent_outcome
        if not ok or said is None:
            # Not sent, or a server that says nothing: no chunk can be
            # matched to it; the record says why.
            _give_up(pending, "disconnected" if not ok else "no timing")
            return ok
        replaced = said.get("replaced")
        queued = said.get("obs") == "queued" and ts is not None
        with trace.lock:
            # The one pushed out first: a newer observation of the same
            # timestep replaces its namesake.
            # A replacement pushed out the newest queued one of that timestep.
            gone = _take(trace.in_flight, replaced, -1) if isinstance(replaced, int) else None
            # Queued after the robot stopped (the reply raced its stop): no
            # chunk will be taken for it, so it is cancelled here, not left
            # waiting in a table stop() has already emptied.
            late = trace.stopped
            if queued and not late:
                trace.in_flight.setdefault(ts, []).append(pending)
                pending = None
        if pending is not None:
            _give_up(pending, "cancelled" if queued else "skipped")
        if gone is not None:
            _give_up(gone, "replaced")
        return ok

    def control_loop_action(*args: Any, **kwargs: Any) -> Any:
        with trace.lock:
            trace.dry_since, trace.dry_ticks = None, 0
        out = cls_act(client, *args, **kwargs)
        with client.latest_action_lock:
            done = client.latest_action
        with trace.lock:
            started = [p for first, p in trace.dispatching if first <= done]
            trace.dispatching = [(f, p) for f, p in trace.dispatching if f > done]
        for p in started:
            p.dispatch.close()
            p.call.close(False)
        return out

    def actions_available() -> bool:
        available = cls_available(client)
        if not available:
            with trace.lock:
                if trace.dry_since is None:
                    trace.dry_since = time.perf_counter_ns()
                trace.dry_ticks += 1
        return available

    def stop(*args: Any, **kwargs: Any) -> Any:
        try:
            return cls_stop(client, *args, **kwargs)
        finally:
            trace.cancel_open()

    client.robot.get_observation = get_observation
    client.stop = stop
    client.send_observation = send_observation
    client.control_loop_action = control_loop_action
    client.actions_available = actions_available
    return client


def _take(in_flight: dict[int, list[_Pending]], ts: int, at: int) -> _Pending | None:
    """Remove and return the observation of timestep ``ts`` at position
    ``at`` (0: oldest, -1: newest), if any."""
    queued = in_flight.get(ts)
    if not queued:
        return None
    pending = queued.pop(at)
    if not queued:
        del in_flight[ts]
    return pending


def _give_up(pending: _Pending, reason: str) -> None:
    # The call's reason, set last: `close(True)` would say "exception".
    if pending.transport is not None:
        pending.transport.close()
    pending.call.fail(reason)
    pending.call.close()


# --------------------------------------------------------------------------
# No change to LeRobot: ``python -m stagetrace.lerobot <LeRobot module> …``.

#: LeRobot's two entry modules: the class to trace, how, and the function
#: its ``__main__`` calls.
_ENTRIES: dict[str, tuple[str, Callable[..., Any], str]] = {
    "lerobot.async_inference.robot_client": ("RobotClient", trace_robot_client, "async_client"),
    "lerobot.async_inference.policy_server": ("PolicyServer", trace_policy_server, "serve"),
}


def _traced_init(cls: type, trace: Callable[..., Any]) -> None:
    """Trace every instance of ``cls`` as its ``__init__`` returns."""
    init = cls.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        trace(self)

    cls.__init__ = __init__  # type: ignore[method-assign]


def main(argv: Sequence[str]) -> int:
    """Run one of LeRobot's async inference modules with its class traced
    (its own argument parsing: ``argv[1:]`` go to it). The robot's records
    go to ``$STAGETRACE_OUT`` (default ``stagetrace-out``)."""
    import importlib
    import os
    import sys

    if not argv or argv[0] not in _ENTRIES:
        names = ", ".join(_ENTRIES)
        print(f"usage: python -m stagetrace.lerobot {{{names}}} [its arguments]", file=sys.stderr)
        return 2
    name, trace, entry = _ENTRIES[argv[0]]
    module = importlib.import_module(argv[0])
    if name == "RobotClient":
        from . import init

        init(os.environ.get("STAGETRACE_OUT", "stagetrace-out"))
    _traced_init(getattr(module, name), trace)
    sys.argv = [argv[0], *argv[1:]]
    # What the module's `if __name__ == "__main__"` does, on the traced class.
    register = getattr(module, "register_third_party_plugins", None)
    if callable(register):
        register()
    getattr(module, entry)()
    if name == "RobotClient":
        from . import finish

        finish()
    return 0


if __name__ == "__main__":
    import sys as _sys

    raise SystemExit(main(_sys.argv[1:]))
