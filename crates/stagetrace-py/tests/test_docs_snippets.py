"""The Python blocks of the docs, as written (issue 40: the docs' own
snippets must compile and run).

Every fenced ```python block of ``README.md``, ``docs/*.md`` and this
package's ``README.md``:

- compiles (top-level ``await`` / ``async for`` allowed: the server
  fragments are the body of a websocket handler);
- names only what the package has: every ``stagetrace…`` attribute chain
  and ``from stagetrace… import …`` resolves on the installed package (a
  block without imports uses the aliases earlier blocks of its file bound,
  as a reader does);
- and runs, where it needs no robot, camera, model or server of its own:
  the Parquet blocks (``docs/records.md``, this README's "Records as
  Parquet"), in a scratch directory holding the ``runs/...`` they read.
  The others need hardware or a peer that a block alone cannot bring up
  (``while running:``, ``camera.read()``, ``0.0.0.0:8000`` forever), so
  they are compiled and name-checked only.

Blocks that use polars need it installed (it is not in
requirements-test.txt); without it those runs fail under CI and are
skipped loudly elsewhere, like every missing prerequisite.
"""

from __future__ import annotations

import ast
import importlib
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import pytest

ROOT = Path(__file__).resolve().parents[3]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "crates/stagetrace-py/README.md"]


@dataclass
class Block:
    file: Path
    line: int  # of the opening fence
    code: str

    @property
    def name(self) -> str:
        return f"{self.file.relative_to(ROOT)}:{self.line}"


def python_blocks(path: Path) -> list[Block]:
    """The fenced ```python blocks of ``path``, their fence's indentation
    removed."""
    blocks: list[Block] = []
    open_at: Optional[tuple[int, int, str]] = None
    lines: list[str] = []
    for i, line in enumerate(path.read_text().splitlines(), 1):
        m = re.match(r"^(\s*)```(.*)$", line)
        if open_at is None:
            if m:
                open_at, lines = (i, len(m.group(1)), m.group(2).strip()), []
        elif m:
            if open_at[2] == "python":
                blocks.append(Block(path, open_at[0], "\n".join(lines) + "\n"))
            open_at = None
        else:
            lines.append(line[min(open_at[1], len(line) - len(line.lstrip())):])
    return blocks


BLOCKS = [b for f in DOCS for b in python_blocks(f)]


def test_the_docs_have_python_blocks_to_check() -> None:
    # The extraction itself: a fence it missed would leave a block untested.
    # By file, not line: the docs move as they are edited.
    names = {b.name for b in BLOCKS}
    files = {n.rsplit(":", 1)[0] for n in names}
    assert {"crates/stagetrace-py/README.md", "docs/records.md"} <= files, sorted(names)
    assert len(BLOCKS) >= 15, sorted(names)


def compiled(block: Block) -> Any:
    return compile(block.code, block.name, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True)


@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: b.name)
def test_block_compiles(block: Block) -> None:
    compiled(block)


def resolve(dotted: str) -> Any:
    """The package's object at ``dotted`` (``stagetrace.lerobot.trace_robot_client``),
    importing submodules on the way; raises when it is not there."""
    parts = dotted.split(".")
    obj = importlib.import_module(parts[0])
    for i, part in enumerate(parts[1:], 1):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            obj = importlib.import_module(".".join(parts[: i + 1]))
    return obj


def package_names(tree: ast.AST, aliases: dict[str, str]) -> list[tuple[str, int]]:
    """Every ``stagetrace`` name the block uses, fully dotted, with its line;
    ``aliases`` (local name → dotted module) is updated by the block's own
    imports, in order."""
    used: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "stagetrace":
                    used.append((a.name, node.lineno))
                    aliases[a.asname or a.name.split(".")[0]] = a.asname and a.name or a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "stagetrace":
            for a in node.names:
                used.append((f"{node.module}.{a.name}", node.lineno))
                aliases[a.asname or a.name] = f"{node.module}.{a.name}"
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and not isinstance(node.ctx, ast.Store):
            chain: list[str] = []
            cur: ast.AST = node
            while isinstance(cur, ast.Attribute):
                chain.append(cur.attr)
                cur = cur.value
            if isinstance(cur, ast.Name) and cur.id in aliases:
                used.append((".".join([aliases[cur.id], *reversed(chain)]), node.lineno))
    return used


def test_every_stagetrace_name_in_the_blocks_exists() -> None:
    missing: list[str] = []
    for path in DOCS:
        # A doc's blocks share what its earlier blocks imported; the bare
        # name `stagetrace` is the package.
        aliases = {"stagetrace": "stagetrace"}
        for block in python_blocks(path):
            for dotted, line in package_names(compiled_tree(block), aliases):
                try:
                    resolve(dotted)
                except (ImportError, AttributeError) as e:
                    missing.append(f"{block.name} (+{line - 1}): {dotted}: {e}")
    assert not missing, "names the package does not have:\n" + "\n".join(missing)


def compiled_tree(block: Block) -> ast.AST:
    return ast.parse(block.code, block.name)


def block(file: str, holding: str) -> Block:
    """The one Python block of ``file`` whose code holds ``holding``: found
    by what it says, not its line, so an edit above it does not lose it."""
    found = [b for b in BLOCKS if b.name.rsplit(":", 1)[0] == file and holding in b.code]
    assert len(found) == 1, f"{len(found)} Python blocks of {file} hold {holding!r}: {[b.name for b in BLOCKS]}"
    return found[0]


def need(module: str) -> None:
    """A prerequisite of a block: missing fails under CI, skips loudly elsewhere."""
    try:
        importlib.import_module(module)
    except ImportError:
        why = f"the docs' {module} blocks NOT RUN: pip install {module} into the test venv"
        if os.environ.get("CI", "").strip() in ("true", "1"):
            pytest.fail(why)
        print(f"SKIPPED: {why}", file=sys.stderr)
        pytest.skip(why)


def run(b: Block, cwd: Path) -> dict[str, Any]:
    """Runs the block as a script would, in ``cwd``; returns its globals."""
    here = os.getcwd()
    os.chdir(cwd)
    try:
        scope: dict[str, Any] = {"__name__": "__main__"}
        exec(compiled(b), scope)
        return scope
    finally:
        os.chdir(here)


def make_parquet_runs(cwd: Path, calls: int = 12) -> None:
    """``runs/parquet`` (robot arm-3) and ``runs/arm-3``, as the records
    docs' Rust and Python setups write them."""
    import stagetrace as st

    st.init(str(cwd / "runs/arm-3"), parquet_dir=str(cwd / "runs/parquet"), robot="arm-3")
    for seq in range(calls):
        with st.call(kind="infer", seq=seq):
            with st.stage("infer"):
                pass
    st.finish()


def test_the_records_docs_pandas_block_runs(tmp_path: Path) -> None:
    need("pandas")
    make_parquet_runs(tmp_path)
    scope = run(block("docs/records.md", "stagetrace.load("), tmp_path)
    calls = scope["calls"]
    assert len(calls) == 12
    assert set(calls["robot"].astype(str)) == {"arm-3"}


def test_the_records_docs_pandas_and_polars_block_runs(tmp_path: Path) -> None:
    need("pandas")
    need("polars")
    make_parquet_runs(tmp_path)
    scope = run(block("docs/records.md", "polars"), tmp_path)
    assert scope["calls"] is not None


def test_the_readmes_parquet_block_runs(tmp_path: Path) -> None:
    """``st.init(...)``, ``...`` (your loop), ``st.finish()``, then both
    loads. The ``...`` makes no call, so the tree holds an earlier run's
    records for the loads to read."""
    need("pandas")
    need("polars")
    make_parquet_runs(tmp_path, calls=7)
    scope = run(block("crates/stagetrace-py/README.md", "parquet_dir="), tmp_path)
    assert (tmp_path / "runs/arm-3").is_dir()
    # The last line: polars, robot arm-3 only.
    assert scope["calls"].height == 7


def test_the_readmes_table_block_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Fifty calls, ``st.finish()``, and the summary printed as the core's
    table: the stages' rows, written where the block says."""
    run(block("crates/stagetrace-py/README.md", "summary.table()"), tmp_path)
    table = capsys.readouterr().out
    assert table.startswith("stage (ms)  count"), table
    for stage in ("capture", "infer", "dispatch", "e2e"):
        assert f"\n{stage} " in table, table
    assert list((tmp_path / "stagetrace-out").glob("records-*.jsonl")), "no records written"
