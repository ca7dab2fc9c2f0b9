"""RequestTimer / Session fields and the msgpack + numpy codec."""

from __future__ import annotations

import random
import time

import msgpack
import numpy as np
import pytest

from stagetrace import server as st

from conftest import without_host

VALID = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def spin(ms: float) -> None:
    end = time.perf_counter_ns() + int(ms * 1e6)
    while time.perf_counter_ns() < end:
        pass


def test_fields_and_types() -> None:
    wall_before = time.time_ns()
    t = st.received({"traceparent": VALID})
    wall_after = time.time_ns()
    assert wall_before <= t.recv_unix_ns <= wall_after
    assert t.trace is not None and t.span is not None and t.span.trace_id == t.trace.trace_id
    with t.stage("queue"):
        spin(2)
    with t.stage("pre"):
        spin(1)
    with t.stage("infer"):
        spin(5)
    with t.stage("post"):
        spin(1)
    timing = t.server_timing()
    assert set(without_host(timing)) == {
        "infer_ms",
        "recv_unix_ns",
        "total_ns",
        "queue_ns",
        "infer_ns",
        "pre_ns",
        "model_ns",
        "post_ns",
    }
    for k in ("recv_unix_ns", "total_ns", "queue_ns", "infer_ns", "pre_ns", "model_ns", "post_ns"):
        assert type(timing[k]) is int, k
    assert type(timing["infer_ms"]) is float
    # queue: receive -> start of inference (pre-processing), the timed wait included.
    assert timing["queue_ns"] >= 2_000_000
    # stage("infer") is the model part under its old name.
    assert timing["model_ns"] >= 5_000_000
    # infer spans pre-processing start to post-processing end.
    assert timing["infer_ns"] >= timing["pre_ns"] + timing["model_ns"] + timing["post_ns"]
    assert timing["infer_ms"] == pytest.approx(timing["infer_ns"] / 1e6)
    assert timing["total_ns"] >= timing["queue_ns"] + timing["infer_ns"]
    t2 = st.received({"traceparent": VALID})
    t2.record("infer", 10)
    assert t2.server_timing()["queue_ns"] >= 0
    assert timing["total_ns"] >= 9_000_000


def test_only_what_is_known() -> None:
    t = st.received()
    timing = t.server_timing()
    assert set(without_host(timing)) == {"recv_unix_ns", "total_ns"}  # absent, never 0 or None
    assert timing["total_ns"] >= 0
    # A timed queue wait alone (no inference timed) is reported as such.
    t = st.received()
    spin(1)
    with t.stage("queue"):
        spin(2)
    timing = t.server_timing()
    assert set(without_host(timing)) == {"recv_unix_ns", "total_ns", "queue_ns"}
    assert 2_000_000 <= timing["queue_ns"] < timing["total_ns"] - 1_000_000


def test_wall_anchor_tracks_the_wall_clock() -> None:
    # recv_unix_ns comes from the monotonic reading through the anchor; it
    # must agree with a direct wall-clock reading to within a millisecond.
    for _ in range(50):
        before = time.time_ns()
        t = st.received()
        after = time.time_ns()
        assert before - 1_000_000 <= t.recv_unix_ns <= after + 1_000_000


def test_total_at_least_infer_over_many() -> None:
    for _ in range(200):
        t = st.received()
        with t.stage("infer"):
            pass
        timing = t.server_timing()
        assert 0 <= timing["infer_ns"] <= timing["total_ns"]


def test_record_external_duration() -> None:
    t = st.received()
    spin(3)
    t.record("infer", 2_000_000)
    timing = t.server_timing()
    assert timing["infer_ns"] == 2_000_000
    assert timing["total_ns"] >= 3_000_000
    assert 1_000_000 <= timing["queue_ns"] <= timing["total_ns"] - 2_000_000
    for bad in (-1, 1.5, True, "5"):
        with pytest.raises(ValueError):
            t.record("infer", bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown stage"):
        t.record("uplink", 1)
    with pytest.raises(ValueError, match="unknown stage"):
        with t.stage("dispatch"):
            pass


def test_stage_exception_still_recorded() -> None:
    t = st.received()
    with pytest.raises(RuntimeError):
        with t.stage("infer"):
            spin(1)
            raise RuntimeError("model failed")
    assert t.server_timing()["infer_ns"] >= 1_000_000


def test_session_prev_total() -> None:
    s = st.Session()
    t1 = s.received()
    spin(2)
    resp = t1.stamp({"actions": 1})
    assert "prev_total_ms" not in resp["server_timing"]
    spin(1)
    total1 = t1.sent()
    assert total1 >= resp["server_timing"]["total_ns"] + 1_000_000
    t2 = s.received()
    assert t2.server_timing()["prev_total_ms"] == pytest.approx(total1 / 1e6)
    # A timer never sent leaves the previous value in place.
    t3 = s.received()
    assert t3.server_timing()["prev_total_ms"] == pytest.approx(total1 / 1e6)


def test_stamp_keeps_openpi_keys() -> None:
    t = st.received()
    resp = t.stamp({"actions": 1, "server_timing": {"infer_ms": 12.5, "custom": "x"}})
    # Not measured by the timer: openpi's own infer_ms stays.
    assert resp["server_timing"]["infer_ms"] == 12.5 and resp["server_timing"]["custom"] == "x"
    assert "total_ns" in resp["server_timing"]
    t = st.received()
    with t.stage("infer"):
        spin(1)
    resp = t.stamp({"server_timing": {"infer_ms": 99999.0}})
    # Measured: ours, consistent with total_ns.
    assert resp["server_timing"]["infer_ms"] < resp["server_timing"]["total_ns"] / 1e6


class SlowPacker:
    """Delegates to a real packer, spinning while packing the action."""

    def __init__(self, delay_ms: float) -> None:
        self._p = st.Packer()
        self._delay_ms = delay_ms

    def pack(self, obj: object) -> bytes:
        if isinstance(obj, np.ndarray):
            spin(self._delay_ms)
        return self._p.pack(obj)

    def pack_map_header(self, n: int) -> bytes:
        return self._p.pack_map_header(n)


def test_encode_response_counts_packing_as_server_time() -> None:
    t = st.received()
    with t.stage("infer"):
        spin(1)
    action = np.arange(70, dtype=np.float32).reshape(10, 7)
    frame = st.encode_response({"actions": action, "server_timing": {"note": "kept"}}, t, SlowPacker(5))  # type: ignore[arg-type]
    resp = st.unpackb(frame)
    assert set(resp) == {"actions", "server_timing"}
    np.testing.assert_array_equal(resp["actions"], action)
    timing = resp["server_timing"]
    assert timing["note"] == "kept"
    assert timing["total_ns"] >= timing["infer_ns"] + 5_000_000


def test_codec_round_trip_and_openpi_encoding() -> None:
    obs = {
        "image": np.random.default_rng(0).integers(0, 255, (4, 5, 3), dtype=np.uint8),
        "state": np.linspace(0, 1, 7),
        "scalar": np.float32(1.5),
        "count": np.int64(3),
        "empty": np.zeros((0, 3), dtype=np.float32),
        "text": np.array(["a", "bc"]),
        "prompt": "pick up the cup",
        "nested": {"a": [1, 2, {"b": np.ones(2, dtype=np.int16)}]},
    }
    raw = st.packb(obs)
    back = st.unpackb(raw)
    for k in ("image", "state", "empty", "text"):
        assert back[k].dtype == obs[k].dtype and back[k].shape == obs[k].shape
        np.testing.assert_array_equal(back[k], obs[k])
    assert back["scalar"] == np.float32(1.5) and back["scalar"].dtype == np.float32
    assert back["count"] == 3 and back["count"].dtype == np.int64
    np.testing.assert_array_equal(back["nested"]["a"][2]["b"], np.ones(2, dtype=np.int16))
    # On the wire, arrays are maps with bin keys, exactly as openpi_client packs them.
    plain = msgpack.unpackb(raw, raw=False)
    assert plain["image"] == {b"__ndarray__": True, b"data": obs["image"].tobytes(), b"dtype": "|u1", b"shape": [4, 5, 3]}
    # A client in another language may use str keys: accepted too.
    str_keyed = msgpack.packb({"a": {"__ndarray__": True, "data": b"\x01\x00\x02\x00", "dtype": "<u2", "shape": [2]}})
    np.testing.assert_array_equal(st.unpackb(str_keyed)["a"], np.array([1, 2], dtype=np.uint16))
    # Fortran-ordered input is sent in C order.
    f = np.asfortranarray(np.arange(6).reshape(2, 3))
    np.testing.assert_array_equal(st.unpackb(st.packb(f)), f)


def test_codec_refuses_unsendable() -> None:
    for bad in (np.array([object()]), np.array([1 + 2j]), object()):
        with pytest.raises(TypeError):
            st.packb({"x": bad})


def nd(data: object, dtype: object, shape: object) -> bytes:
    return msgpack.packb({"x": {"__ndarray__": True, "data": data, "dtype": dtype, "shape": shape}})


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"\x81",  # map header, no entries
        b"\xc1",  # never-used byte
        msgpack.packb({"a": 1}) + b"\x00",  # trailing data
        msgpack.packb({"a": 1})[:-1],
        nd(b"\x00" * 3, "<f4", [1]),  # too short for the shape
        nd(b"\x00" * 8, "<f4", [1]),  # too long
        nd(b"\x00" * 8, "|O", [1]),  # object arrays: never
        nd(b"\x00" * 8, "<c8", [1]),
        nd(b"\x00" * 8, "i4,i4", [1]),  # structured
        nd(b"", "S0", [10**12, 10**12]),  # zero itemsize
        nd(b"\x00" * 4, "not-a-dtype", [1]),
        nd(b"\x00" * 4, 7, [1]),
        nd(b"\x00" * 4, "<f4", [-1]),
        nd(b"\x00" * 4, "<f4", [1.0]),
        nd(b"\x00" * 4, "<f4", [True]),
        nd(b"\x00" * 4, "<f4", 1),
        nd(b"\x00" * 4, "<f4", [1] * 40),
        nd(b"\x00" * 4, "<f4", [2**62, 2**62]),
        nd("abcd", "<f4", [1]),  # data as str, not bin
        msgpack.packb({"x": {"__npgeneric__": True, "data": "nan?", "dtype": "<i8"}}),
        b"\x91" * 5000 + b"\xc0",  # 5000 nested arrays
        msgpack.packb({"k": 1}).replace(b"\xa1k", b"\x91\x01"),  # unhashable key
    ],
)
def test_codec_rejects_hostile(raw: bytes) -> None:
    with pytest.raises(st.MalformedRequest):
        st.unpackb(raw)


def test_codec_random_bytes_only_malformed() -> None:
    rng = random.Random(99)
    valid = st.packb({"image": np.zeros((8, 8, 3), np.uint8), "traceparent": VALID, "state": [1.0, 2.0]})
    for i in range(5000):
        if i % 2:
            buf = bytearray(valid)
            for _ in range(rng.randint(1, 4)):
                buf[rng.randrange(len(buf))] = rng.randrange(256)
            raw = bytes(buf)
        else:
            raw = bytes(rng.randrange(256) for _ in range(rng.randint(0, 64)))
        try:
            st.unpackb(raw)
        except st.MalformedRequest:
            pass
    with pytest.raises(st.MalformedRequest):
        st.unpackb("text frame")  # type: ignore[arg-type]


def test_a_slewed_wall_clock_still_gives_the_wall_time_of_the_receive(monkeypatch: pytest.MonkeyPatch) -> None:
    # A wall clock an NTP daemon slews 5 ms/s fast against the monotonic
    # clock (one CI machine's did): two seconds after any earlier reading,
    # the receive stamp is still the wall time at the receive, to the ns.
    from stagetrace import timer

    mono = [10_000_000_000]

    def perf_counter_ns() -> int:
        return mono[0]

    def time_ns() -> int:
        return 1_700_000_000_000_000_000 + mono[0] * 1005 // 1000

    monkeypatch.setattr(timer.time, "perf_counter_ns", perf_counter_ns)
    monkeypatch.setattr(timer.time, "time_ns", time_ns)
    timer._ANCHOR.wall_ns(mono[0])
    mono[0] += 2_000_000_000
    recv = mono[0]
    mono[0] += 50_000  # converted 50 µs after the receive reading
    truth = 1_700_000_000_000_000_000 + recv * 1005 // 1000
    # 50 µs carried back on the monotonic clock: 250 ns of slew, no more.
    assert abs(timer._ANCHOR.wall_ns(recv) - truth) <= 250


# ---------------------------------------------------------------- inference's parts


def test_parts_are_back_to_back_and_add_up_to_infer() -> None:
    """pre, model and post are contiguous, as the Rust InferTimer's marks:
    the code between two parts counts in the next one, so the three add up
    to infer exactly."""
    t = st.received()
    with t.stage("pre"):
        spin(1)
    spin(2)  # the policy's own code between two parts
    with t.stage("model"):
        spin(3)
    with t.stage("post"):
        spin(1)
    timing = t.server_timing()
    assert timing["pre_ns"] + timing["model_ns"] + timing["post_ns"] == timing["infer_ns"]
    assert timing["pre_ns"] >= 1_000_000 and timing["post_ns"] >= 1_000_000
    assert timing["model_ns"] >= 5_000_000  # its 3 ms and the 2 ms before it


def test_stage_infer_is_the_model_part_under_its_old_name() -> None:
    t = st.received()
    with t.stage("infer"):
        spin(2)
    t.record("infer", 1_000_000)
    timing = t.server_timing()
    assert timing["model_ns"] >= 3_000_000
    assert "pre_ns" not in timing and "post_ns" not in timing
    assert timing["infer_ns"] >= timing["model_ns"] - 1_000_000


def test_around_a_policy_its_code_before_and_after_the_model_is_pre_and_post() -> None:
    """PolicyServer's bracket around policy.infer: a policy that times only
    its model gets pre and post for what runs around it, as with the Rust
    InferTimer's model_start / model_done; the parts fill infer."""
    t = st.received()
    with st.handling(t), t._bracket():
        spin(1)  # the policy's own pre-processing, untimed
        with st.stage("model") as s:
            s.result(np.zeros(3))
            spin(3)
        spin(2)  # untimed post-processing
    timing = t.server_timing()
    assert timing["pre_ns"] >= 1_000_000 and timing["model_ns"] >= 3_000_000 and timing["post_ns"] >= 2_000_000
    assert timing["pre_ns"] + timing["model_ns"] + timing["post_ns"] == timing["infer_ns"]
    # A policy that times nothing: infer only, no parts made up.
    t = st.received()
    with st.handling(t), t._bracket():
        spin(1)
    timing = t.server_timing()
    assert timing["infer_ns"] >= 1_000_000
    assert not {"pre_ns", "model_ns", "post_ns"} & set(timing)


def test_module_stage_outside_a_request_times_nothing() -> None:
    assert st.current() is None
    with st.stage("model") as s:
        assert s.result(5) == 5
    with pytest.raises(ValueError, match="unknown stage"):
        st.stage("modle")
    t = st.received()
    with st.handling(t):
        assert st.current() is t
        with st.stage("pre"):
            spin(1)
    assert st.current() is None
    assert t.server_timing()["pre_ns"] >= 1_000_000


def test_a_known_arrival_moves_the_receive_and_is_queue() -> None:
    before = time.perf_counter_ns()
    spin(3)
    t = st.received()
    t.arrived_at(before, "accept_wait")
    with t.stage("model"):
        spin(1)
    timing = t.server_timing()
    assert timing["accept_wait_ns"] == t.read_ns - before >= 3_000_000
    assert timing["queue_ns"] >= timing["accept_wait_ns"]
    assert timing["total_ns"] >= timing["accept_wait_ns"] + timing["infer_ns"]
    assert t.arrival_ns == before
    # Only the past, and only ints; a wait of a name the wire lacks is refused.
    t2 = st.received()
    t2.arrived_at(time.perf_counter_ns() + 10**9)
    t2.arrived_at(1.5)  # type: ignore[arg-type]
    assert "loop_wait_ns" not in t2.server_timing() and t2.arrival_ns == t2.read_ns
    with pytest.raises(ValueError, match="unknown wait"):
        t2.arrived_at(before, "uplink")
    # Without inference timed, the wait alone is the queue.
    t3 = st.received()
    t3.arrived_at(before)
    timing = t3.server_timing()
    assert timing["queue_ns"] == timing["loop_wait_ns"] == t3.read_ns - before
