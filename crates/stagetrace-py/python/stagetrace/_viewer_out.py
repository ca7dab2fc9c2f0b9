"""Output files of the viewers' exporters: never a half-written or
overwritten one."""

from __future__ import annotations

import os
from pathlib import Path


def fresh_path(out: "os.PathLike[str] | str", overwrite: bool = False) -> Path:
    """Where to write ``out``: ``out`` itself when it does not exist (or
    ``overwrite``), else the first free ``<stem>-1<suffix>``,
    ``<stem>-2<suffix>``, … beside it, so a second export never touches the
    first one's file."""
    p = Path(out)
    if overwrite or not p.exists():
        return p
    n = 1
    while True:
        q = p.with_name(f"{p.stem}-{n}{p.suffix}")
        if not q.exists():
            return q
        n += 1


def temp_path(final: Path) -> Path:
    """A hidden name beside ``final`` to write into before the rename that
    makes the file appear whole (same directory: the rename is atomic)."""
    return final.with_name(f".{final.name}.{os.getpid()}.inprogress")
