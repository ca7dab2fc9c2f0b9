"""`stagetrace report` on Parquet against the JSON-lines path and DuckDB,
in one paired run: the same calls, the three readers taking turns round by
round, each one's CPU (user + sys) and peak RSS taken from the kernel's
account of that process alone (wait4).

    STAGETRACE_SIZE_CALLS=1000000 STAGETRACE_SIZE_OUT=/tmp/sz \\
      cargo test -p stagetrace-parquet --release --test size -- --nocapture
    cargo build --release -p stagetrace-cli
    python crates/stagetrace-parquet/bench/report_vs_duckdb.py /tmp/sz \\
      --stagetrace target/release/stagetrace --rounds 5

DuckDB computes the per-stage quantile table (p50, p90, p99 of every stage
column) over the same Parquet files, as `stagetrace summarize` does (within
0.1 %, with the slowest calls and the threshold counts); `report` computes
exact quantiles and everything else it prints (verdicts, outliers,
periodicity).
"""

import argparse
import os
import statistics
import subprocess
import sys

STAGES = [
    "capture_ms", "uplink_ms", "queue_ms", "infer_ms", "downlink_ms",
    "dispatch_ms", "roundtrip_ms", "server_ms", "net_ms", "e2e_ms",
]

DUCKDB = """
import duckdb, sys
cols = sys.argv[2].split(",")
q = ", ".join(f"quantile_cont({c}, [0.5, 0.9, 0.99]) AS {c}" for c in cols)
rows = duckdb.sql(
    f"SELECT kind, {q} FROM read_parquet('{sys.argv[1]}/**/*.parquet', hive_partitioning = true) "
    "WHERE NOT coalesce(warmup, false) AND NOT coalesce(failed, false) GROUP BY kind"
).fetchall()
assert rows, "no rows"
"""


def run(cmd):
    """CPU seconds (user + sys) and peak RSS (MB) of one process."""
    with open(os.devnull, "wb") as null:
        p = subprocess.Popen(cmd, stdout=null)
        _, status, usage = os.wait4(p.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"failed: {' '.join(cmd)}")
    return usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", help="STAGETRACE_SIZE_OUT of the size test (lines/, parquet/)")
    ap.add_argument("--stagetrace", default="target/release/stagetrace")
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    readers = {
        "stagetrace report --json, Parquet": [a.stagetrace, "report", "--json", "--memory-budget", "100000", f"{a.dir}/parquet"],
        "stagetrace report --json, JSON lines": [a.stagetrace, "report", "--json", "--memory-budget", "100000", f"{a.dir}/lines"],
        "stagetrace summarize --json --no-verdicts, Parquet": [
            a.stagetrace, "summarize", "--json", "--no-verdicts", f"{a.dir}/parquet"],
        "DuckDB, per-stage quantiles, Parquet": [
            sys.executable, "-c", DUCKDB, f"{a.dir}/parquet", ",".join(STAGES)],
        "Python start + import duckdb (DuckDB's floor)": [sys.executable, "-c", "import duckdb"],
        "stagetrace summarize --json, Parquet (with the verdicts)": [
            a.stagetrace, "summarize", "--json", f"{a.dir}/parquet"],
    }
    got = {name: [] for name in readers}
    for r in range(a.rounds):
        for name, cmd in readers.items():
            got[name].append(run(cmd))
        print(f"round {r + 1}/{a.rounds} done", file=sys.stderr)
    print(f"| reader | CPU s (median of {a.rounds}) | peak RSS MB |")
    print("|---|---|---|")
    med = {}
    for name, runs in got.items():
        med[name] = statistics.median(c for c, _ in runs)
        print(f"| {name} | {med[name]:.2f} | {max(m for _, m in runs):.0f} |")
    report, lines, summarize, duckdb, _, _ = readers
    print()
    print(f"report on Parquet / report on JSON lines, CPU: {med[report] / med[lines]:.2f}x")
    print(f"summarize on Parquet / DuckDB, CPU (the per-stage quantile table): "
          f"{med[summarize] / med[duckdb]:.2f}x")
    print(f"report on Parquet / DuckDB, CPU (report: the table and every verdict): "
          f"{med[report] / med[duckdb]:.2f}x")


if __name__ == "__main__":
    main()
