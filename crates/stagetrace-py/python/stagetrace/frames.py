"""Records as a DataFrame: ``stagetrace.load("runs/parquet")``.

Reads the Parquet tree the recorder writes with ``parquet_dir=``
(``robot=<robot>/date=<day>/part-….parquet``, docs/records.md) into one
pandas or polars DataFrame: one row per call, the record's field names and
units as columns (``infer_ms`` in milliseconds, ``observer_us`` in
microseconds, null where a record has no such field), plus ``robot`` and
``date`` from the directories. Files still being written (hidden
``.part-….inprogress``) are not read.
"""

from __future__ import annotations

import os
from typing import Any, Optional


def load(path: "os.PathLike[str] | str", *, robot: Optional[str] = None, engine: Optional[str] = None) -> Any:
    """The calls under ``path`` (a tree, a partition directory or one file).

    ``robot``: only that robot's partition (the others are not opened).
    ``engine``: ``"pandas"`` or ``"polars"``; by default pandas when it is
    installed, else polars. pandas reads through pyarrow.
    """
    root = os.fspath(path)
    if not os.path.exists(root):
        raise FileNotFoundError(f"{root}: no such file or directory (give the parquet_dir of a run)")
    if engine not in (None, "pandas", "polars"):
        raise ValueError(f"engine {engine!r}: use 'pandas' or 'polars'")
    if engine in (None, "pandas"):
        try:
            import pandas  # noqa: F401
            import pyarrow.dataset as ds
        except ImportError:
            if engine == "pandas":
                raise ImportError("stagetrace.load(engine='pandas') needs pandas and pyarrow: pip install pandas pyarrow") from None
        else:
            return _table(ds, root, robot).to_pandas()
    try:
        import polars as pl
    except ImportError:
        raise ImportError("stagetrace.load needs pandas and pyarrow, or polars: pip install polars") from None
    frame = pl.scan_parquet(_glob(root), hive_partitioning=True)
    if robot is not None:
        frame = frame.filter(pl.col("robot") == robot)
    return frame.collect()


def _table(ds: Any, root: str, robot: Optional[str]) -> Any:
    # Hive directories become the robot and date columns; names starting
    # with "." (a file still being written) are skipped by default.
    data = ds.dataset(root, format="parquet", partitioning="hive")
    if robot is None:
        return data.to_table()
    return data.to_table(filter=ds.field("robot") == robot)


def _glob(root: str) -> str:
    return root if os.path.isfile(root) else os.path.join(root, "**", "*.parquet")
