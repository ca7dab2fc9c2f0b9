"""``batch_size`` and ``cache`` in ``server_timing``: what a batcher or a
result cache did with the request (Rust: ``InferTimer::set_batch_size`` /
``set_cache_hit``), as the Rust parser reads them (docs/protocol.md)."""

from __future__ import annotations

import msgpack
import numpy as np
import pytest

from conftest import without_host
from stagetrace import server as st

TIME_KEYS = {"recv_unix_ns", "total_ns"}


def wire(timing: dict) -> dict:
    """The map as a plain msgpack decoder (no numpy hook) sees it on the wire."""
    return msgpack.unpackb(st.packb({"server_timing": timing}), raw=False)["server_timing"]


def test_absent_unless_set() -> None:
    t = st.received()
    assert t.batch_size is None and t.cache_hit is None
    assert set(without_host(t.server_timing())) == TIME_KEYS  # never 0, "" or None for "not applicable"


def test_set_batch_size_and_cache_hit_are_emitted() -> None:
    t = st.received()
    t.set_batch_size(4)
    t.set_cache_hit(False)
    timing = t.server_timing()
    assert set(without_host(timing)) == TIME_KEYS | {"batch_size", "cache"}
    assert timing["batch_size"] == 4 and type(timing["batch_size"]) is int
    assert timing["cache"] == "miss"
    assert (t.batch_size, t.cache_hit) == (4, False)
    # A later call replaces the value.
    t.set_batch_size(1)
    t.set_cache_hit(True)
    timing = t.server_timing()
    assert (timing["batch_size"], timing["cache"]) == (1, "hit")
    # On the wire: a msgpack unsigned int and a msgpack str.
    raw = wire(timing)
    assert raw["batch_size"] == 1 and type(raw["batch_size"]) is int
    assert raw["cache"] == "hit" and type(raw["cache"]) is str


def test_numpy_values_are_sent_as_plain_types() -> None:
    # e.g. a batch size from np.count_nonzero, a hit flag from a numpy comparison.
    t = st.received()
    t.set_batch_size(np.int64(3))
    t.set_cache_hit(np.bool_(True))
    timing = t.server_timing()
    assert type(timing["batch_size"]) is int and timing["batch_size"] == 3
    assert timing["cache"] == "hit"
    frame = st.encode_response({"actions": np.zeros((2, 7), np.float32)}, t)
    raw = msgpack.unpackb(frame, raw=False)["server_timing"]
    # Not numpy's {"__npgeneric__": ...} ext map, which the Rust parser would reject.
    assert raw["batch_size"] == 3 and raw["cache"] == "hit"


def test_batch_size_above_the_limit_is_capped() -> None:
    t = st.received()
    t.set_batch_size(st.MAX_BATCH_SIZE)
    assert t.server_timing()["batch_size"] == st.MAX_BATCH_SIZE == 1 << 20
    for big in (st.MAX_BATCH_SIZE + 1, 10**30, np.uint64(2**63)):
        t.set_batch_size(big)
        assert t.server_timing()["batch_size"] == st.MAX_BATCH_SIZE


@pytest.mark.parametrize("bad", [0, -1, 2.0, 1.5, float("nan"), True, np.bool_(True), "4", b"4", None, [4]])
def test_bad_batch_size_raises_and_keeps_the_old_value(bad: object) -> None:
    t = st.received()
    t.set_batch_size(2)
    with pytest.raises(ValueError, match="batch size must be"):
        t.set_batch_size(bad)  # type: ignore[arg-type]
    assert t.batch_size == 2 and t.server_timing()["batch_size"] == 2


@pytest.mark.parametrize("bad", ["hit", "miss", 1, 0, None, np.int64(1)])
def test_bad_cache_hit_raises_and_keeps_the_old_value(bad: object) -> None:
    t = st.received()
    with pytest.raises(ValueError, match="cache hit must be True"):
        t.set_cache_hit(bad)  # type: ignore[arg-type]
    assert t.cache_hit is None and "cache" not in t.server_timing()


def test_valid_values_from_the_response_map_are_kept() -> None:
    before = st.stats()["rejected_timing"]
    t = st.received()
    resp = t.stamp({"actions": 1, "server_timing": {"batch_size": np.int64(8), "cache": "miss", "note": "x"}})
    timing = resp["server_timing"]
    assert timing["batch_size"] == 8 and type(timing["batch_size"]) is int
    assert timing["cache"] == "miss" and timing["note"] == "x"
    assert TIME_KEYS <= set(timing)
    # Capped like set_batch_size.
    resp = st.received().stamp({"server_timing": {"batch_size": 1 << 40}})
    assert resp["server_timing"]["batch_size"] == st.MAX_BATCH_SIZE
    assert st.stats()["rejected_timing"] == before


def test_the_timer_wins_over_the_response_map() -> None:
    before = st.stats()["rejected_timing"]
    t = st.received()
    t.set_batch_size(2)
    t.set_cache_hit(True)
    # The map's values, bad or not, are replaced: never sent, not counted.
    timing = t.stamp({"server_timing": {"batch_size": "lots", "cache": "miss"}})["server_timing"]
    assert (timing["batch_size"], timing["cache"]) == (2, "hit")
    assert st.stats()["rejected_timing"] == before


@pytest.mark.parametrize(
    "bad",
    [
        {"batch_size": 0},
        {"batch_size": -3},
        {"batch_size": "8"},
        {"batch_size": 8.0},
        {"batch_size": True},
        {"batch_size": None},
        {"cache": "HIT"},
        {"cache": True},
        {"cache": b"hit"},
        {"cache": None},
        {"cache": "x" * 10_000},
    ],
)
def test_bad_values_in_the_response_map_are_dropped_and_counted(bad: dict) -> None:
    """A bad ``batch_size`` / ``cache`` would make the Rust client reject the
    whole map, losing the call's timing: it is dropped instead, the rest stays."""
    before = st.stats()["rejected_timing"]
    t = st.received()
    with t.stage("infer"):
        pass
    frame = st.encode_response({"actions": 1, "server_timing": {**bad, "pre_ns": 5}}, t)
    timing = msgpack.unpackb(frame, raw=False)["server_timing"]
    assert not set(bad) & set(timing), timing
    assert timing["pre_ns"] == 5 and {"recv_unix_ns", "total_ns", "infer_ns", "queue_ns"} <= set(timing)
    assert st.stats()["rejected_timing"] - before == 1


def test_both_bad_in_one_map_count_twice() -> None:
    before = st.stats()["rejected_timing"]
    timing = st.received().stamp({"server_timing": {"batch_size": 0, "cache": "maybe"}})["server_timing"]
    assert set(without_host(timing)) == TIME_KEYS
    assert st.stats()["rejected_timing"] - before == 2


def test_first_rejection_is_logged_once() -> None:
    """Only a process's first rejection is logged (a policy that always sends
    a bad value must not flood the log); every one is counted."""
    import subprocess
    import sys
    from pathlib import Path

    script = """
import logging
from stagetrace import server as st
logging.basicConfig(level=logging.WARNING, format="%(name)s %(levelname)s %(message)s")
for _ in range(3):
    st.received().stamp({"server_timing": {"cache": "HIT"}})
print(st.stats()["rejected_timing"])
"""
    proc = subprocess.run(
        [sys.executable, "-c", script],
        cwd=Path(st.__file__).resolve().parent,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "3"
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("stagetrace.server WARNING dropped server_timing['cache'] = 'HIT'"), lines
    assert 'send "hit" or "miss"' in lines[0] and "rejected_timing" in lines[0]
