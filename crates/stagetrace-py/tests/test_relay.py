"""The Python relay (``stagetrace.relay``) as a hop: the Python
server module continues the trace and reports the same hop timing: robot → delaying proxy → Python relay → delaying proxy →
policy server (the Rust ``policy_server`` example, or the Python
``PolicyServer``), driven by the Rust ``policy_client`` example, whose
records must carry the relay's hop and time as behind the Rust ``Relay``
(``crates/stagetrace-net/tests/hops.rs``).

Truths, per call, from the relay's own stamps (its ``on_request`` record:
its ``forward_ns`` / ``reply_ns`` / ``total_ns`` and the downstream's map as
the downstream sent it), never from the estimate:

- ``relay_ms`` = the relay's received → forwarded + reply received → sent,
  and at least the gateway work injected in its forward path;
- hop 0's ``net_ms`` = the client's round trip − the relay's total, hop 1's
  = the relay's forward → reply − the server's total, each at least the
  proxy's two delays;
- every process runs on this host's clock, so the true offset of each hop
  is 0: the truth is inside a hop's stated bound exactly when
  ``|offset_ms| ≤ err_ms``.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest
from conftest import EchoPolicy, LoopThread, cargo_artifact, report_timing
from delay_proxy import DelayProxy

import stagetrace
from stagetrace import server as st
from stagetrace import trace as stt
from stagetrace.relay import Relay, RelayRecord

CALLS = 30
MODEL_MS = 4.0
#: The gateway's own work on each request (a sleep in its forward path).
GATEWAY_MS = 6.0
#: (uplink, downlink) delays, robot ↔ relay and relay ↔ server.
LINK0 = (0.006, 0.001)
LINK1 = (0.002, 0.005)
RUN_TIMEOUT_S = 240
US = 0.0011  # the record's µs resolution, both roundings


@pytest.fixture(scope="module")
def policy_client() -> Path:
    return cargo_artifact("-p", "examples", "--example", "policy_client", name="policy_client")


@pytest.fixture(scope="module")
def rust_server() -> Iterator[int]:
    exe = cargo_artifact("-p", "examples", "--example", "policy_server", name="policy_server")
    proc = subprocess.Popen(
        [str(exe), "--port", "0", "--model-ms", str(MODEL_MS)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        line = proc.stdout.readline()
        assert line.startswith("listening on ws://127.0.0.1:"), (line, proc.stderr.read() if proc.poll() else "")
        yield int(line.rsplit(":", 1)[1])
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture
def net() -> Iterator[LoopThread]:
    """The relay and the proxies, on a loop of their own (another machine)."""
    lt = LoopThread()
    yield lt
    lt.stop()


class Gateway:
    """A gateway's own work: a known time in the relay's forward path."""

    def __init__(self, ms: float) -> None:
        self.ms = ms
        self.seen: list[dict[Any, Any]] = []

    async def __call__(self, request: dict[Any, Any]) -> dict[Any, Any]:
        self.seen.append(request)
        end = time.perf_counter() + self.ms / 1e3
        # asyncio.sleep can wake early by a clock tick; finish by the clock.
        import asyncio

        await asyncio.sleep(self.ms / 1e3)
        while time.perf_counter() < end:
            await asyncio.sleep(0)
        return request


def start_path(net: LoopThread, server_port: int, **relay_kw: Any) -> tuple[Relay, int, list[RelayRecord], Gateway]:
    """proxy(LINK0) → relay → proxy(LINK1) → server_port; returns the relay,
    the robot's port, the relay's records and its gateway work."""
    p1 = net.run(DelayProxy.start(server_port, *LINK1))
    records: list[RelayRecord] = []
    gateway = Gateway(GATEWAY_MS)
    relay = Relay(f"ws://127.0.0.1:{p1.port}", "127.0.0.1", 0, transform=gateway, on_request=records.append, **relay_kw)
    relay_port = net.run(relay.start())
    p0 = net.run(DelayProxy.start(relay_port, *LINK0))
    net.closers = [relay.close, p0.close, p1.close]  # type: ignore[attr-defined]
    return relay, p0.port, records, gateway


def stop_path(net: LoopThread) -> None:
    for close in net.closers:  # type: ignore[attr-defined]
        net.run(close())


def run_client(exe: Path, port: int, out: Path) -> list[dict[str, Any]]:
    proc = subprocess.run(
        [str(exe), f"ws://127.0.0.1:{port}", "--calls", str(CALLS), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )
    assert proc.returncode == 0, f"policy_client failed ({proc.returncode}):\n{proc.stderr[-4000:]}"
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["ok"] == CALLS and summary["failed"] == 0, summary
    files = sorted(out.glob("records*.jsonl"))
    return [json.loads(line) for f in files for line in f.read_text().splitlines() if line.strip()]


def check_hops(records: list[dict[str, Any]], relayed: list[RelayRecord]) -> None:
    """Every record against the relay's own stamps (the module doc)."""
    assert len(records) == CALLS and len(relayed) == CALLS
    by_trace = {r.trace_id: r for r in relayed}
    inside = [0, 0]
    for r in records:
        g = by_trace[r["trace_id"]]  # the relay continued the robot's trace
        assert g.traceparent[3:35] == r["trace_id"]
        t = g.timing
        server = t["downstream"]
        own_ms = (t["total_ns"] - (t["reply_ns"] - t["forward_ns"])) / 1e6
        assert r["relay_ms"] == pytest.approx(own_ms, abs=US), r
        assert r["relay_ms"] >= GATEWAY_MS
        hops = r["hops"]
        assert len(hops) == 2, hops
        # Hop 0: robot ↔ relay; hop 1: relay ↔ server (exact, one clock each side).
        assert hops[0]["net_ms"] == pytest.approx(r["roundtrip_ms"] - t["total_ns"] / 1e6, abs=2 * US), (hops, t)
        link1 = (t["reply_ns"] - t["forward_ns"] - server["total_ns"]) / 1e6
        assert hops[1]["net_ms"] == pytest.approx(link1, abs=2 * US), (hops, t)
        assert hops[0]["relay_ms"] == pytest.approx(own_ms, abs=US)
        assert "relay_ms" not in hops[1]  # the policy server's time is server_ms
        assert hops[0]["net_ms"] >= (LINK0[0] + LINK0[1]) * 1e3
        assert hops[1]["net_ms"] >= (LINK1[0] + LINK1[1]) * 1e3
        # The two-party figures keep their meaning: the policy server's.
        assert r["server_ms"] == pytest.approx(server["total_ns"] / 1e6, abs=US)
        assert r["infer_ms"] == pytest.approx(server["infer_ns"] / 1e6, abs=US)
        # net = roundtrip − server: both hops and the relay between them.
        assert r["net_ms"] == pytest.approx(hops[0]["net_ms"] + hops[1]["net_ms"] + r["relay_ms"], abs=4 * US)
        for i, h in enumerate(hops):
            # One clock on this host: the truth (offset 0) inside the bound.
            if abs(h["offset_ms"]) <= h["err_ms"] + US:
                inside[i] += 1
        assert r["offset_ms"] == pytest.approx(hops[0]["offset_ms"] + hops[1]["offset_ms"], abs=2 * US)
    for i in range(2):
        # At least 99 % of the calls: with 30 calls, every one.
        report_timing(f"hop {i} calls outside the bound", CALLS - inside[i], 0.01 * CALLS)
        assert inside[i] >= 0.99 * CALLS, f"hop {i}: truth inside the bound on {inside[i]} of {CALLS}"
    print(
        "relay_ms p50 %.3f (gateway work %.1f); hop 0 net p50 %.3f (delays %.1f); hop 1 net p50 %.3f (delays %.1f)"
        % (
            sorted(r["relay_ms"] for r in records)[CALLS // 2],
            GATEWAY_MS,
            sorted(r["hops"][0]["net_ms"] for r in records)[CALLS // 2],
            sum(LINK0) * 1e3,
            sorted(r["hops"][1]["net_ms"] for r in records)[CALLS // 2],
            sum(LINK1) * 1e3,
        )
    )


def test_rust_client_through_the_python_relay_to_the_rust_server(
    policy_client: Path, rust_server: int, net: LoopThread, tmp_path: Path
) -> None:
    relay, port, relayed, gateway = start_path(net, rust_server)
    try:
        records = run_client(policy_client, port, tmp_path)
    finally:
        stop_path(net)
    check_hops(records, relayed)
    # The trace context was replaced, not passed on: the policy never sees it,
    # and the relay forwarded the observation untouched otherwise.
    assert all("traceparent" not in req for req in gateway.seen)
    assert relay.stats() == {"connections": 1, "requests": CALLS, "failed": 0}


def test_rust_client_through_the_python_relay_to_the_python_server(
    policy_client: Path, start_server, net: LoopThread, tmp_path: Path
) -> None:
    served: list[tuple[st.TraceParent | None, str | None]] = []
    _, server_port = start_server(EchoPolicy(MODEL_MS), on_request=lambda t, _timing: served.append((t.trace, t.tracestate)))
    _, port, relayed, _ = start_path(net, server_port)
    try:
        records = run_client(policy_client, port, tmp_path)
    finally:
        stop_path(net)
    check_hops(records, relayed)
    # The server saw the robot's trace id, with the relay's span as parent.
    sent = {r.trace_id: r.traceparent for r in relayed}
    assert [tp.trace_id for tp, _ in served] == [r["trace_id"] for r in records]
    for tp, _ in served:
        assert str(tp) == sent[tp.trace_id]


def test_the_python_relay_continues_flags_and_tracestate_by_the_core_rules(start_server, net: LoopThread) -> None:
    """W3C Trace Context Level 2 through the Python relay (the Rust core's
    rules): same trace id, a new parent id, the caller's flags (unknown
    bits cleared), `tracestate` lines combined with a repeated key's
    left-most member kept; two `traceparent`s start a new trace."""
    from websockets.sync.client import connect

    served: list[tuple[st.TraceParent | None, str | None]] = []
    _, server_port = start_server(EchoPolicy(0.0), on_request=lambda t, _timing: served.append((t.trace, t.tracestate)))
    relay = Relay(f"ws://127.0.0.1:{server_port}", "127.0.0.1", 0)
    relay_port = net.run(relay.start())
    caller = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-fe"  # sampled 0, random 1, unknown bits
    before = st.stats()
    try:
        with connect(f"ws://127.0.0.1:{relay_port}", compression=None) as ws:
            ws.recv()  # metadata
            p = msgpack.Packer(use_bin_type=True)
            # tracestate as two "lines": a repeated msgpack key, as two header lines.
            frame = (
                p.pack_map_header(4)
                + p.pack("state")
                + p.pack(1.0)
                + p.pack("traceparent")
                + p.pack(caller)
                + p.pack("tracestate")
                + p.pack("vendor=a, other=b")
                + p.pack("tracestate")
                + p.pack("vendor=c,third=d")
            )
            ws.send(frame)
            reply = msgpack.unpackb(ws.recv(), raw=False)
            twice = p.pack_map_header(3) + p.pack("state") + p.pack(1.0)
            twice += p.pack("traceparent") + p.pack(caller) + p.pack("traceparent") + p.pack(caller)
            ws.send(twice)
            msgpack.unpackb(ws.recv(), raw=False)
    finally:
        net.run(relay.close())
    (tp, ts), (new_tp, new_ts) = served
    assert tp.trace_id == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert tp.parent_id != "00f067aa0ba902b7"
    assert tp.flags == 0x02
    assert ts == "vendor=a,other=b,third=d"
    # The relay's own timing, with the server's nested.
    timing = reply["server_timing"]
    # The Rust relay's stamps, and the Python relay's wait for its loop
    # (kernel receive stamps on Linux).
    assert set(timing) - {"loop_wait_ns"} == {"recv_unix_ns", "total_ns", "forward_ns", "reply_ns", "downstream"}
    assert timing["forward_ns"] <= timing["reply_ns"] <= timing["total_ns"]
    assert "infer_ns" in timing["downstream"]
    # Two traceparents: ambiguous, a new trace, counted.
    assert new_tp.trace_id != tp.trace_id and new_tp.flags == 0x03 and new_ts is None
    after = st.stats()
    assert after["rejected_traceparent"] - before["rejected_traceparent"] == 1
    assert after["rejected_tracestate"] - before["rejected_tracestate"] == 1  # the repeated key


def test_a_traced_call_made_by_the_python_policy_continues_the_incoming_trace(start_server, tmp_path: Path) -> None:
    """The Python ``PolicyServer``'s policy calls another server with
    ``TracedClientPolicy``: that request carries the incoming trace id,
    flags and tracestate, with the policy's transport span as parent."""
    from websockets.sync.client import connect

    inner_seen: list[tuple[st.TraceParent | None, str | None]] = []
    _, inner_port = start_server(EchoPolicy(0.0), on_request=lambda t, _timing: inner_seen.append((t.trace, t.tracestate)))
    rec = stagetrace.Recorder(str(tmp_path))

    class Calls:
        """A policy that asks another model (a second policy server)."""

        def __init__(self) -> None:
            self.client = stagetrace.TracedClientPolicy("127.0.0.1", inner_port, recorder=rec)
            self.outgoing: list[stt.Continued | None] = []

        def infer(self, obs: dict[str, Any]) -> dict[str, Any]:
            self.outgoing.append(stt.outgoing())
            return {"inner": self.client.infer({"x": 1.0})["keys"]}

    policy = Calls()
    _, outer_port = start_server(policy, in_thread=True)
    caller = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"  # not sampled
    with connect(f"ws://127.0.0.1:{outer_port}", compression=None) as ws:
        ws.recv()
        ws.send(st.packb({"state": 1.0, "traceparent": caller, "tracestate": "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"}))
        reply = st.unpackb(ws.recv())
        ws.send(st.packb({"state": 1.0}))  # no context: the inner call starts its own trace
        st.unpackb(ws.recv())
    rec.finish()
    assert reply["inner"] == ["x"]  # the trace context never reaches the policy
    (tp, ts), (other, _) = inner_seen
    assert tp.trace_id == "0af7651916cd43dd8448eb211c80319c"
    assert tp.parent_id != "b7ad6b7169203331"
    assert tp.flags == 0x00
    assert ts == "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"
    assert other.trace_id != tp.trace_id
    assert policy.outgoing[0] is not None and policy.outgoing[1] is None
    # The policy's own records of those calls: the first continues the
    # caller's trace (the id the inner server saw), the second has its own.
    mine = [json.loads(line) for f in sorted(tmp_path.glob("records*.jsonl")) for line in f.read_text().splitlines()]
    assert [r["trace_id"] for r in mine] == [tp.trace_id, other.trace_id]


def test_the_python_client_through_the_python_relay_records_the_same_hops(
    rust_server: int, net: LoopThread, tmp_path: Path
) -> None:
    """``TracedClientPolicy`` (openpi's real client underneath) through the
    Python relay: its records carry the relay's hop and time exactly as the
    Rust client's do (the same checks, against the relay's own stamps)."""
    relay, port, relayed, _ = start_path(net, rust_server)
    rec = stagetrace.Recorder(str(tmp_path))
    try:
        client = stagetrace.TracedClientPolicy("127.0.0.1", port, recorder=rec)
        for i in range(CALLS):
            with stagetrace.call("infer", i, recorder=rec):
                client.infer({"state": [0.1] * 7})
    finally:
        rec.finish()
        stop_path(net)
    records = [json.loads(line) for f in sorted(tmp_path.glob("records*.jsonl")) for line in f.read_text().splitlines()]
    check_hops(records, relayed)
    assert relay.stats() == {"connections": 1, "requests": CALLS, "failed": 0}


def test_two_python_relays_nest_and_the_record_has_three_links(
    policy_client: Path, start_server, net: LoopThread, tmp_path: Path
) -> None:
    """Relays compose: robot → relay A → relay B → Python policy server gives
    three hops, and relay_ms is the two relays' own times summed."""
    _, server_port = start_server(EchoPolicy(MODEL_MS))
    inner: list[RelayRecord] = []
    b = Relay(f"ws://127.0.0.1:{server_port}", "127.0.0.1", 0, on_request=inner.append)
    b_port = net.run(b.start())
    outer: list[RelayRecord] = []
    a = Relay(f"ws://127.0.0.1:{b_port}", "127.0.0.1", 0, transform=Gateway(GATEWAY_MS), on_request=outer.append)
    a_port = net.run(a.start())
    try:
        records = run_client(policy_client, a_port, tmp_path)
    finally:
        net.run(a.close())
        net.run(b.close())
    own = lambda t: (t["total_ns"] - (t["reply_ns"] - t["forward_ns"])) / 1e6  # noqa: E731
    by_trace_a = {r.trace_id: r.timing for r in outer}
    by_trace_b = {r.trace_id: r.timing for r in inner}
    for r in records:
        ta, tb = by_trace_a[r["trace_id"]], by_trace_b[r["trace_id"]]
        assert ta["downstream"] == tb  # A nested B's map as B sent it
        hops = r["hops"]
        assert len(hops) == 3, hops
        assert hops[0]["relay_ms"] == pytest.approx(own(ta), abs=US)
        assert hops[1]["relay_ms"] == pytest.approx(own(tb), abs=US)
        assert r["relay_ms"] == pytest.approx(own(ta) + own(tb), abs=2 * US)
        assert hops[0]["relay_ms"] >= GATEWAY_MS
        link1 = (ta["reply_ns"] - ta["forward_ns"] - tb["total_ns"]) / 1e6
        assert hops[1]["net_ms"] == pytest.approx(link1, abs=2 * US)
