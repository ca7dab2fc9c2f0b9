"""W3C traceparent / tracestate parsing: valid, malformed, hostile, oversized."""

from __future__ import annotations

import random
import re

import pytest

from stagetrace import server as st

TID = "4bf92f3577b34da6a3ce929d0e0e4736"
SID = "00f067aa0ba902b7"
VALID = f"00-{TID}-{SID}-01"

# An independent statement of the version-00 grammar, to check the parser against.
ORACLE_00 = re.compile(r"00-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}\Z")


def test_valid_version_00() -> None:
    tp = st.parse_traceparent(VALID)
    assert tp == st.TraceParent(0, TID, SID, 1)
    assert tp.sampled
    assert str(tp) == VALID
    unsampled = st.parse_traceparent(f"00-{TID}-{SID}-00")
    assert unsampled is not None and not unsampled.sampled


def test_surrounding_whitespace_ignored() -> None:
    assert st.parse_traceparent(f" \t{VALID}\t ") == st.parse_traceparent(VALID)
    assert st.parse_traceparent(f"{VALID[:30]} {VALID[31:]}") is None  # not inside


def test_bytes_accepted() -> None:
    assert st.parse_traceparent(VALID.encode()) == st.parse_traceparent(VALID)


@pytest.mark.parametrize(
    "value",
    [
        "",
        "00",
        VALID[:-1],  # too short
        VALID + "0",  # version 00 must be exactly 55 characters
        VALID + "-extra",  # ... even with a dash
        VALID.upper(),
        f"00-{TID.upper()}-{SID}-01",
        f"00-{TID}-{SID.upper()}-01",
        f"00-{TID}-{SID}-0A",
        f"00-{'0' * 32}-{SID}-01",  # all-zero trace id
        f"00-{TID}-{'0' * 16}-01",  # all-zero parent id
        f"ff-{TID}-{SID}-01",  # version ff is forbidden
        f"0g-{TID}-{SID}-01",
        f"00_{TID}-{SID}-01",
        f"00-{TID}_{SID}-01",
        f"00-{TID}-{SID}_01",
        " " + VALID[:-1],
        VALID[:-1] + " ",
        f"00-{TID[:-1]}z-{SID}-01",
        f"00-{TID}-{SID[:-1]}\u0661-01",  # ARABIC-INDIC DIGIT ONE: not ASCII hex
        f"00-{TID}-{SID}-0\x00",
        VALID.replace("-", "\u2010"),  # a Unicode hyphen, same length
    ],
)
def test_malformed_rejected(value: str) -> None:
    assert st.parse_traceparent(value) is None


def test_future_version_parsed_by_spec_rules() -> None:
    # A later version may append fields after a dash; the first four parse as 00.
    tp = st.parse_traceparent(f"cc-{TID}-{SID}-01-what-the-future-brings")
    assert tp is not None and tp.version == 0xCC and tp.trace_id == TID and tp.flags == 1
    assert str(tp) == VALID  # we propagate as version 00
    assert st.parse_traceparent(f"cc-{TID}-{SID}-01") is not None
    # ... but not glued onto the flags.
    assert st.parse_traceparent(f"cc-{TID}-{SID}-01x") is None


@pytest.mark.parametrize("value", [None, 0, 1.5, True, [VALID], {"tp": VALID}, (VALID,), object()])
def test_wrong_types_rejected(value: object) -> None:
    assert st.parse_traceparent(value) is None


def test_oversized_rejected_without_scanning() -> None:
    huge = f"cc-{TID}-{SID}-01-" + "a" * 10_000_000
    assert st.parse_traceparent(huge) is None
    assert st.parse_traceparent(huge.encode()) is None
    at_limit = f"cc-{TID}-{SID}-01-" + "a" * (st.MAX_TRACEPARENT_LEN - 56)
    assert len(at_limit) == st.MAX_TRACEPARENT_LEN
    assert st.parse_traceparent(at_limit) is not None
    assert st.parse_traceparent(at_limit + "a") is None


def test_non_ascii_bytes_rejected() -> None:
    assert st.parse_traceparent(b"\xff" * 55) is None
    assert st.parse_traceparent(VALID.encode()[:-1] + b"\x80") is None


def test_random_input_never_raises_and_matches_oracle() -> None:
    rng = random.Random(1234)
    alphabet = "0123456789abcdefABCDEF-xz \x00\u0661"
    accepted = 0
    for i in range(20_000):
        if i % 2:
            # Mutate a valid header at one or two positions: mostly near-misses.
            chars = list(VALID)
            for _ in range(rng.randint(1, 2)):
                chars[rng.randrange(len(chars))] = rng.choice(alphabet)
            s = "".join(chars)
        else:
            s = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 70)))
        tp = st.parse_traceparent(s)
        if s.startswith("00"):
            assert (tp is not None) == bool(ORACLE_00.match(s)), s
        if tp is not None:
            accepted += 1
            assert str(tp)[3:] == s[3:55]
        raw = bytes(rng.randrange(256) for _ in range(rng.randint(0, 80)))
        st.parse_traceparent(raw)  # must not raise
    assert accepted > 100  # the mutations do keep some valid ones


def test_child_keeps_trace_and_flags() -> None:
    tp = st.parse_traceparent(VALID)
    kids = {tp.child() for _ in range(100)}
    assert len(kids) == 100
    for kid in kids:
        assert kid.trace_id == TID and kid.flags == 1 and kid.parent_id != SID
        assert st.parse_traceparent(str(kid)) == kid


def test_tracestate() -> None:
    assert st.parse_tracestate("rojo=00f067aa0ba902b7,congo=t61rcWkgMzE") == "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"
    assert st.parse_tracestate(" rojo=1 ,, tenant@vendor=x ") == "rojo=1,tenant@vendor=x"
    for bad in ["Rojo=1", "rojo", "rojo=", "rojo=a=b,x=1,=2", "rojo=1,rojo=2", "rojo=1 2=", "rojo=\u00e9", 7]:
        assert st.parse_tracestate(bad) is None, bad
    assert st.parse_tracestate(",".join(f"k{i}=v" for i in range(32))) is not None
    assert st.parse_tracestate(",".join(f"k{i}=v" for i in range(33))) is None
    assert st.parse_tracestate("k=" + "v" * 600) is None


def test_read_trace_pops_and_counts() -> None:
    before = st.stats()
    req = {"traceparent": VALID, "tracestate": "rojo=1", "state": 1}
    tp, ts = st.read_trace(req)
    assert tp is not None and tp.trace_id == TID and ts == "rojo=1"
    assert req == {"state": 1}

    req = {b"traceparent": VALID.encode(), "state": 1}  # bin key, bin value
    assert st.read_trace(req, pop=False)[0] is not None
    assert b"traceparent" in req

    assert st.read_trace({"state": 1}) == (None, None)  # absent: not counted
    assert st.read_trace([VALID]) == (None, None)  # not a map: ignored

    bad = {"traceparent": "garbage", "tracestate": "rojo=1"}
    assert st.read_trace(bad) == (None, None)
    assert bad == {}
    assert st.read_trace({"traceparent": VALID, "tracestate": "BAD"}) == (st.parse_traceparent(VALID), None)
    after = st.stats()
    assert after["rejected_traceparent"] - before["rejected_traceparent"] == 1
    assert after["rejected_tracestate"] - before["rejected_tracestate"] == 1
