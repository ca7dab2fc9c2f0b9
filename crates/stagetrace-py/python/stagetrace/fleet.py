"""A fleet's month on a Dask cluster: ``python -m stagetrace.fleet TREE``.

Each partition file of a Hive tree (``robot=<r>/date=<day>/part-*.parquet``,
as ``stagetrace convert`` and the Parquet sink write it) is summarised on a
worker (:func:`stagetrace.summarize`: one file's calls in memory at a time),
the summaries are merged in a tree of :func:`stagetrace.merge` tasks, and the
report is printed: the same JSON as ``stagetrace summarize TREE --json``,
verdicts included (each partition analysed exactly on its worker, the
evidence of its verdicts merged: docs/records.md, "A fleet's month")
(the merge is exact and order-free, so the cluster's scheduling cannot change
a number). No scheduler of our own: Dask distributed schedules, retries and
moves the summaries (pickled as their bytes, a few kB each).

Without ``--scheduler`` it starts a local cluster of ``--workers`` processes
(default 2), one thread each; with ``--scheduler tcp://host:8786`` it uses a
running cluster (``dask scheduler`` / ``dask worker``; docs/records.md,
"A fleet's month"). Every worker must have this ``stagetrace`` installed and
see the tree at the same path.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, List, Optional, Sequence

import stagetrace

#: How many summaries one merge task takes: a tree of merges, so no worker
#: holds every summary of a big fleet at once and the merges run in parallel.
FAN_IN = 8


def partition_files(tree: "str | Path", robots: Optional[Sequence[str]] = None) -> List[str]:
    """The finished Parquet files of a Hive tree, in path order (hidden
    ``.inprogress`` files and directories left out); a tree without Parquet
    files gives its JSON-line record files (``records*.jsonl``) instead.
    ``robots`` keeps only those ``robot=`` partitions."""
    root = Path(tree)
    if root.is_file():
        return [str(root)]

    def visible(p: Path) -> bool:
        return not any(part.startswith(".") for part in p.relative_to(root).parts)

    def wanted(p: Path) -> bool:
        if not robots:
            return True
        names = [part[len("robot=") :] for part in p.relative_to(root).parts if part.startswith("robot=")]
        return any(n in robots for n in names)

    files = sorted(p for p in root.rglob("*.parquet") if p.is_file() and visible(p) and wanted(p))
    if not files:
        files = sorted(p for p in root.rglob("records*.jsonl") if p.is_file() and visible(p) and wanted(p))
    return [str(p) for p in files]


def _summarize(path: str, verdicts: bool = True, baseline: Optional[str] = None) -> "stagetrace.PartitionSummary":
    # A plain Python function, so Dask pickles it by reference to this module.
    return stagetrace.summarize(path, verdicts=verdicts, baseline=baseline)


def _merge(*summaries: "stagetrace.PartitionSummary") -> "stagetrace.PartitionSummary":
    return stagetrace.merge(summaries)


def summarize_on(
    client: Any,
    files: Sequence[str],
    fan_in: int = FAN_IN,
    verdicts: bool = True,
    baseline: Optional[str] = None,
) -> "stagetrace.PartitionSummary":
    """Summarises ``files`` on a Dask ``client``'s workers and merges them
    there, ``fan_in`` at a time; returns the merged summary. ``verdicts``:
    analyse each file for its verdicts (against ``baseline``, an idle run's
    records every worker sees, when given)."""
    if not files:
        raise ValueError("no partition file to summarise")
    futures = client.map(_summarize, list(files), verdicts=verdicts, baseline=baseline, pure=False)
    while len(futures) > 1:
        futures = [client.submit(_merge, *futures[i : i + fan_in], pure=False) for i in range(0, len(futures), fan_in)]
    return futures[0].result()


def run(
    tree: "str | Path",
    scheduler: Optional[str] = None,
    workers: int = 2,
    robots: Optional[Sequence[str]] = None,
    verdicts: bool = True,
    baseline: Optional[str] = None,
) -> "stagetrace.PartitionSummary":
    """The merged summary of a tree, on the cluster at ``scheduler`` or on a
    local one of ``workers`` processes."""
    from dask.distributed import Client, LocalCluster

    files = partition_files(tree, robots)
    if not files:
        raise ValueError(f"{tree}: no Parquet file (nor records*.jsonl) found")
    if scheduler:
        with Client(scheduler) as client:
            return summarize_on(client, files, verdicts=verdicts, baseline=baseline)
    with LocalCluster(
        n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=":0"
    ) as cluster, Client(cluster) as client:
        return summarize_on(client, files, verdicts=verdicts, baseline=baseline)


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m stagetrace.fleet",
        description="Summarise a Parquet tree of records on a Dask cluster: the report of "
        "`stagetrace summarize TREE --json`, one partition file per task.",
    )
    p.add_argument("tree", help="the root of the tree (robot=<r>/date=<day>/part-*.parquet)")
    p.add_argument("--scheduler", metavar="ADDRESS", help="a running Dask scheduler (tcp://host:8786); "
                   "default: a local cluster")
    p.add_argument("--workers", type=int, default=2, metavar="N", help="local cluster's worker processes (default 2)")
    p.add_argument("--robot", action="append", metavar="ROBOT", help="only this robot= partition (repeatable)")
    p.add_argument("--table", action="store_true", help="print the table for people instead of JSON")
    p.add_argument("--out", metavar="FILE", help="also write the merged summary's bytes to FILE")
    p.add_argument("--no-verdicts", action="store_true", help="the table only: no partition analysed for verdicts")
    p.add_argument("--baseline", metavar="PATH", help="an idle run's records (file or directory, seen by every "
                   "worker) each partition's stages are judged against")
    args = p.parse_args(argv)
    if args.no_verdicts and args.baseline:
        p.error("--baseline judges the verdicts, and --no-verdicts asks for none: give one")
    try:
        summary = run(
            args.tree,
            scheduler=args.scheduler,
            workers=args.workers,
            robots=args.robot,
            verdicts=not args.no_verdicts,
            baseline=args.baseline,
        )
    except (ValueError, OSError) as e:
        print(f"stagetrace.fleet: {e}", file=sys.stderr)
        return 2
    if args.out:
        Path(args.out).write_bytes(summary.to_bytes())
    print(summary.table() if args.table else json.dumps(summary.report(), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
