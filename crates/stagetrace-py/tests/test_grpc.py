"""The generic gRPC interceptors (``stagetrace.grpc``) with the real
``grpcio``, on LeRobot's own service definition (its ``services_pb2``):
a unary call (``GetActions``) and a request-streaming one
(``SendObservations``) made inside ``stagetrace.call()`` become the call's
transport stage; the caller's trace continues on the server; the server's
timing, sent in the trailing metadata, lands in the record as the server
measured it; a server's malformed timing trailer is counted and the call
goes on.
"""

from __future__ import annotations

import json
import statistics
import threading
import time
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest
from conftest import report_timing
from lerobot.transport import services_pb2, services_pb2_grpc
from lerobot_peers import ArrivalWitness

import stagetrace
from stagetrace import server as st_server
from stagetrace import timer as st_timer
from stagetrace.grpc import TIMING_KEY, client_interceptor, place_receive, server_interceptor, timer

MODEL_S = 0.008


class Policy(services_pb2_grpc.AsyncInferenceServicer):
    """Times its model with the request's timer and keeps what it saw."""

    def __init__(self) -> None:
        self.traces: list[str | None] = []
        self.timings: list[dict[str, Any]] = []

    def GetActions(self, request: Any, context: Any) -> Any:  # noqa: N802
        t = timer()
        self.traces.append(t.trace.trace_id if t is not None and t.trace is not None else None)
        assert t is not None
        with t.stage("infer"):
            time.sleep(MODEL_S)
        self.timings.append(t)
        return services_pb2.Actions(data=b"chunk")

    def SendObservations(self, request_iterator: Any, context: Any) -> Any:  # noqa: N802
        received = b"".join(m.data for m in request_iterator)
        t = timer()
        # The stream has ended: the request has arrived, its timer runs.
        assert t is not None and received == b"ab"
        self.traces.append(t.trace.trace_id if t.trace is not None else None)
        return services_pb2.Empty()


class GarbledTiming(services_pb2_grpc.AsyncInferenceServicer):
    """A server whose timing trailer is not a msgpack map."""

    def GetActions(self, request: Any, context: Any) -> Any:  # noqa: N802
        context.set_trailing_metadata(((TIMING_KEY, b"\xc1 not msgpack"),))
        return services_pb2.Actions(data=b"chunk")


def _serve(servicer: Any, interceptors: list[Any], workers: int = 2) -> tuple[grpc.Server, int]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=workers), interceptors=interceptors)
    services_pb2_grpc.add_AsyncInferenceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, port


def _records(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for f in sorted(out.glob("records*.jsonl")) for line in f.read_text().splitlines()]


@pytest.fixture
def out(tmp_path: Path) -> Any:
    stagetrace.init(tmp_path)
    yield tmp_path
    if stagetrace._default is not None:
        stagetrace.finish()


def test_unary_and_streamed_calls_carry_the_trace_out_and_the_timing_back(out: Path) -> None:
    policy = Policy()
    server, port = _serve(policy, [server_interceptor()])
    channel = grpc.intercept_channel(grpc.insecure_channel(f"127.0.0.1:{port}"), client_interceptor())
    stub = services_pb2_grpc.AsyncInferenceStub(channel)
    try:
        for i in range(6):
            with stagetrace.call(kind="infer", seq=i):
                assert stub.GetActions(services_pb2.Empty()).data == b"chunk"
        with stagetrace.call(kind="send", seq=6):
            stub.SendObservations(
                iter([services_pb2.Observation(data=b"a"), services_pb2.Observation(data=b"b")])
            )
        # Outside a call: untouched, no record, no trace.
        stub.GetActions(services_pb2.Empty())
    finally:
        server.stop(grace=None)
    stagetrace.finish()
    rs = _records(out)
    assert [r["seq"] for r in rs] == list(range(7))
    # The robot's trace went on at the server (the untraced last call had none).
    assert policy.traces == [r["trace_id"] for r in rs] + [None]
    for r, t in zip(rs[:6], policy.timings[:6]):
        sent = t.server_timing()
        # The server's own figures, to the record's µs resolution.
        assert r["infer_ms"] == pytest.approx(sent["infer_ns"] / 1e6, abs=0.0011), r
        assert r["infer_ms"] >= MODEL_S * 1e3, r
        assert r["queue_ms"] == pytest.approx(sent["queue_ns"] / 1e6, abs=0.0011), r
        for f in ("uplink_ms", "downlink_ms", "roundtrip_ms", "server_ms"):
            assert f in r, (f, r)
    streamed = rs[6]
    assert streamed["kind"] == "send" and "server_ms" in streamed and not streamed.get("failed")


def test_a_malformed_timing_trailer_is_counted_and_the_call_goes_on(out: Path) -> None:
    server, port = _serve(GarbledTiming(), [])
    channel = grpc.intercept_channel(grpc.insecure_channel(f"127.0.0.1:{port}"), client_interceptor())
    stub = services_pb2_grpc.AsyncInferenceStub(channel)
    before = st_server.stats()["rejected_timing"]
    try:
        for i in range(3):
            with stagetrace.call(seq=i):
                assert stub.GetActions(services_pb2.Empty()).data == b"chunk"
    finally:
        server.stop(grace=None)
    assert st_server.stats()["rejected_timing"] - before == 3
    stagetrace.finish()
    rs = _records(out)
    assert [r["seq"] for r in rs] == [0, 1, 2]
    # The transport stage is there; the server's split is absent, not 0.
    assert all("roundtrip_ms" in r and "server_ms" not in r and not r.get("failed") for r in rs), rs


def test_a_failed_call_is_a_failed_record_with_the_status_as_reason(out: Path) -> None:
    # Nothing listens there: UNAVAILABLE.
    server, port = _serve(Policy(), [])
    server.stop(grace=None)
    channel = grpc.intercept_channel(grpc.insecure_channel(f"127.0.0.1:{port}"), client_interceptor())
    stub = services_pb2_grpc.AsyncInferenceStub(channel)
    with pytest.raises(grpc.RpcError):
        with stagetrace.call(seq=0):
            stub.GetActions(services_pb2.Empty(), timeout=2)
    stagetrace.finish()
    (r,) = _records(out)
    assert r["failed"] and r["error"] == "disconnected", r


def test_a_malformed_traceparent_is_counted_and_the_request_served() -> None:
    policy = Policy()
    server, port = _serve(policy, [server_interceptor()])
    stub = services_pb2_grpc.AsyncInferenceStub(grpc.insecure_channel(f"127.0.0.1:{port}"))
    before = st_server.stats()["rejected_traceparent"]
    try:
        reply, call = stub.GetActions.with_call(
            services_pb2.Empty(), metadata=(("traceparent", "00-not-a-trace-01"),)
        )
    finally:
        server.stop(grace=None)
    assert reply.data == b"chunk"
    assert st_server.stats()["rejected_traceparent"] - before == 1
    assert policy.traces == [None]
    # The timing still comes back.
    timing = dict(call.trailing_metadata())[TIMING_KEY]
    assert stagetrace.codec.unpackb(timing)["infer_ns"] >= MODEL_S * 1e9


class OneWorkerHeld(services_pb2_grpc.AsyncInferenceServicer):
    """``GetActions`` holds its worker until released (as LeRobot's waits
    for an observation); ``SendObservations`` notes when its handler
    started, by the call's arrival as the test's witness saw it."""

    def __init__(self, witness: ArrivalWitness) -> None:
        self.witness = witness
        self.holding = threading.Event()
        self.release = threading.Event()
        self.waits_ms: list[float] = []
        self.came: list[int] = []
        #: The handler's start → it had read the whole stream (ns).
        self.reads: list[int] = []

    def GetActions(self, request: Any, context: Any) -> Any:  # noqa: N802
        self.holding.set()
        self.release.wait(5)
        return services_pb2.Actions(data=b"late")

    def SendObservations(self, request_iterator: Any, context: Any) -> Any:  # noqa: N802
        started = time.perf_counter_ns()
        came = self.witness.pop(context)
        assert came is not None
        self.waits_ms.append((started - came) / 1e6)
        self.came.append(came)
        for _ in request_iterator:
            pass
        self.reads.append(time.perf_counter_ns() - started)
        return services_pb2.Empty()


HELD_S = 0.03


def _release_after_arrival(witness: ArrivalWitness, release: threading.Event) -> None:
    witness.seen.wait(10)
    time.sleep(HELD_S)
    release.set()


def test_a_call_that_waits_for_the_only_worker_is_queue_not_uplink(out: Path) -> None:
    """One worker, held by an untraced ``GetActions``; a traced
    ``SendObservations`` waits for it. Its ``accept_wait_ms`` is the wait
    the witness (an interceptor of the test's own, ahead of stagetrace's in
    grpcio's serving thread) and the handler's own start stamp saw, never
    more; it is in ``queue_ms``, not in the uplink. The streamed call's
    ``tx_wait_ms`` ends when grpcio took its first message; a unary call has
    none (its request goes to grpc's C core in one call)."""
    witness = ArrivalWitness()
    servicer = OneWorkerHeld(witness)
    server, port = _serve(servicer, [witness, server_interceptor()], workers=1)
    channel = grpc.intercept_channel(grpc.insecure_channel(f"127.0.0.1:{port}"), client_interceptor())
    stub = services_pb2_grpc.AsyncInferenceStub(channel)
    rounds = 6
    before: list[int] = []
    try:
        for i in range(rounds):
            servicer.holding.clear()
            servicer.release.clear()
            holder = threading.Thread(target=stub.GetActions, args=(services_pb2.Empty(),))
            holder.start()
            assert servicer.holding.wait(5)
            witness.seen.clear()
            # The worker is given up HELD_S after the call is in.
            threading.Thread(target=_release_after_arrival, args=(witness, servicer.release)).start()
            with stagetrace.call(kind="send", seq=i):
                before.append(time.perf_counter_ns())
                stub.SendObservations(iter([services_pb2.Observation(data=b"a")]))
            holder.join(5)
        servicer.release.set()
        with stagetrace.call(kind="poll", seq=rounds):
            stub.GetActions(services_pb2.Empty())
    finally:
        servicer.release.set()
        server.stop(grace=None)
    stagetrace.finish()
    rs = {r["seq"]: r for r in _records(out)}
    assert sorted(rs) == list(range(rounds + 1))
    short = []
    for i in range(rounds):
        r, truth = rs[i], servicer.waits_ms[i]
        assert truth >= HELD_S * 1e3, (truth, r)
        assert r["accept_wait_ms"] <= truth + 0.0005, (truth, r)
        short.append(truth - r["accept_wait_ms"])
        assert r["queue_ms"] >= r["accept_wait_ms"] - 0.0005, r
        # The uplink ends where the call was in, not after the wait: by the
        # witness's arrival (plus the stream's reading), give or take the
        # clock estimate's error and the serving thread's steps between
        # the witness's stamp and stagetrace's.
        up_truth = (servicer.came[i] - before[i] + servicer.reads[i]) / 1e6
        over = r["uplink_ms"] - up_truth - abs(r["offset_ms"]) - (truth - r["accept_wait_ms"])
        assert over <= 0.0005, (up_truth, r)
        assert r["tx_wait_ms"] <= r["roundtrip_ms"], r
    typical = statistics.median(short)
    report_timing("grpc accept_wait short of the witness, median (ms)", typical, 0.2)
    assert typical <= 0.2, short
    assert "tx_wait_ms" not in rs[rounds] and "rx_wait_ms" not in rs[rounds], rs[rounds]


def test_without_the_arrival_the_receive_is_the_pickup_and_says_so() -> None:
    """Where grpcio gives no arrival (no hook ran before the pool), the
    receive stamp is the handler's pickup and the map says so
    (``recv_at_pickup``): the robot estimates the arrival. With it, the
    stamp moves to the arrival and the wait is sent as ``accept_wait_ns``;
    a stream's reading after the pickup stays in (``transfer_ns``)."""
    t = st_timer.received()
    complete = t._recv_mono
    assert place_receive(t, None, complete - 5_000, streamed=True) == {"recv_at_pickup": 1}
    assert t._recv_mono == complete - 5_000
    t = st_timer.received()
    complete = t._recv_mono
    extra = place_receive(t, complete - 9_000_000, complete - 2_000, streamed=True)
    assert extra == {"accept_wait_ns": 9_000_000 - 2_000, "transfer_ns": 2_000}
    assert t._recv_mono == complete - 9_000_000 + 2_000
    timing = t.server_timing()
    assert timing["recv_unix_ns"] == t.recv_unix_ns
    # An arrival after the pickup is no arrival.
    t = st_timer.received()
    assert place_receive(t, t._recv_mono + 1, t._recv_mono, streamed=False) == {"recv_at_pickup": 1}
