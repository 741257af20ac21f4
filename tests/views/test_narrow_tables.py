"""At 80-160 columns the CLI's tables keep kernel names readable: numbers take only what their
header's longest word and values need, a kernel name stays whole where the width allows and is
otherwise broken at its own boundaries (after ``.``, ``_``, ``:``), never mid-token; a value cut
before the table shows ``…``. ``jitwatch status``'s serving compiles keep ``rank`` at 80 columns,
and its "left out" notes follow only tables with rows. A real journal (two tensor-parallel ranks,
kernel names as vLLM's) served by the real sidecar (uvicorn on 127.0.0.1), printed by the real CLI
(typer's runner with ``COLUMNS``); the demo's summary from that sidecar's real ``/jit``."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import triton
import triton.language as tl
from typer.testing import CliRunner

from jitwatch.cli import app
from jitwatch.core.events import Event, EventKind, Phase
from jitwatch.store.journal import Journal
from jitwatch.tables import BREAK_AFTER
from tests.test_cli import TOKEN, serving
from tests.views.test_status_backend_column import tables

T0 = 1_700_000_000.0
SAMPLER = "make_sampler.<locals>.sample_probs"
ZERO = "zero_kv_blocks_kernel"
SLOT = "slot_mapping_kernel"
GUARD = "0/0: tensor 'logits' size mismatch at index 0. expected 1, actual 2"
LONG_KEY = "[" + ", ".join("('*fp16', 'D')" for _ in range(12)) + "]{'num_warps': 4, 'num_stages': 3}"


@triton.jit
def copy_kv_cache_kernel(kv_cache_ptr, out_ptr, n, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(kv_cache_ptr + offs, mask=offs < n), mask=offs < n)


def ev(kind: EventKind, ts: float, rank: int = 0, **fields: object) -> Event:
    return Event(kind=kind, ts=ts, rank=rank, pid=100 + rank, host="node-a", **fields)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def sidecar(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Ranks 0 and 1 (tp 0 and 1) warm ``slot_mapping_kernel`` and the torch.compile graph
    ``make_sampler.<locals>.sample_probs``; in serving, rank 1 compiles ``zero_kv_blocks_kernel``
    (never warmed; its key longer than the 80 characters the Kernels table shows) and recompiles
    the graph (Dynamo's guard failure)."""
    jdir = tmp_path_factory.mktemp("journal")
    events = []
    for rank in (0, 1):
        events += [
            ev(EventKind.WORKER_START, T0, rank, attrs={"mode": "warn", "tp_rank": rank}),
            ev(EventKind.WARMUP_START, T0 + 1, rank, phase=Phase.WARMUP),
            ev(EventKind.COMPILE, T0 + 2, rank, phase=Phase.WARMUP, backend="triton", kernel=SLOT,
               key=f"k-slot-{rank}", duration_s=0.4),
            ev(EventKind.COMPILE, T0 + 2.5, rank, phase=Phase.WARMUP, backend="torch_compile", kernel=SAMPLER,
               key="0/0", duration_s=0.3),
            ev(EventKind.WARMUP_COMPLETE, T0 + 3, rank, phase=Phase.SERVING, duration_s=2.0),
        ]  # fmt: skip
    events += [
        ev(EventKind.COMPILE, T0 + 4, 1, phase=Phase.SERVING, backend="triton", kernel=ZERO, key=LONG_KEY,
           duration_s=0.122, attrs={"request_id": 3}),
        ev(EventKind.COMPILE, T0 + 5, 1, phase=Phase.SERVING, backend="torch_compile", kernel=SAMPLER, key="0/1",
           duration_s=0.133,
           attrs={"request_id": 3, "reason": GUARD, "reason_class": "size mismatch", "compile_id": "0/1"}),
    ]  # fmt: skip
    with Journal(jdir) as j:
        j.write(events)
    with serving(jdir) as base:
        yield base


def status(url: str, columns: int) -> str:
    res = CliRunner().invoke(app, ["status", "--url", url, "--token", TOKEN], env={"COLUMNS": str(columns)})
    assert res.exit_code == 0, res.output
    return res.stdout


def unbroken(out: str, cell: str) -> bool:
    """Whether ``cell`` (a table cell, continuation lines joined by spaces) is one line."""
    return " " not in cell


def broken_at_boundaries(cell: str, whole: str) -> bool:
    """Whether a cell holding ``whole`` over several lines broke it only after a
    :data:`BREAK_AFTER` character (continuation lines joined by spaces, as ``tables`` joins them)."""
    pieces = cell.split(" ")
    return "".join(pieces) == whole and all(p[-1] in BREAK_AFTER for p in pieces[:-1])


def header_widths(out: str, title: str) -> dict[str, int]:
    """The width of each column of the table titled ``title``, by its (joined) header."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == title)
    border = lines[start + 1]
    assert border.startswith("┏"), out
    widths = [len(seg) - 2 for seg in border.strip("┏┓").split("┳")]
    heads: list[list[str]] = [[] for _ in widths]
    for line in lines[start + 2 :]:
        if not line.startswith("┃"):
            break
        for h, c in zip(heads, line.strip("┃").split("┃"), strict=True):
            if c.strip():
                h.append(c.strip())
    return {" ".join(h): w for h, w in zip(heads, widths, strict=True)}


@pytest.mark.parametrize("columns", [80, 100, 160])
def test_status_keeps_kernel_names_whole_and_numbers_narrow(sidecar: str, columns: int) -> None:
    """At 80 columns ``zero_kv_blocks_kern│el`` sat beside a 21-character ``compile s (all phases)``
    column; at 160 ``make_sampler.<locals>.│sample_probs`` wrapped and ``last key`` stopped
    mid-token. Now the numbers' columns are as wide as their header's longest word or their widest
    value (their header on one line only when there is room left once the names are whole); each
    kernel name is whole where it fits (all of them from 100 columns; at 80 the two shorter ones,
    the longest broken after a ``.``); ``last key`` cut at 80 characters ends ``…``."""
    out = status(sidecar, columns)
    assert max(len(line) for line in out.splitlines()) <= columns, out
    found = tables(out)
    kernels = {row["kernel"].replace(" ", ""): row for row in found["Kernels"]}
    assert set(kernels) == {SAMPLER, ZERO, SLOT}, out
    widths = header_widths(out, "Kernels")
    for name in ("warmup", "serving", "compile s (all phases)"):  # its longest word, or whole on one line
        least = max(len(w) for w in name.split())
        assert widths[name] == least or (columns > 100 and widths[name] == len(name)), (name, widths, out)
    assert widths["kernel"] >= (len(SAMPLER) if columns >= 100 else len(ZERO)), (widths, out)
    for name, row in kernels.items():
        if columns >= 100 or name != SAMPLER:
            assert unbroken(out, row["kernel"]), (name, out)
        else:
            assert broken_at_boundaries(row["kernel"], name), (row["kernel"], out)
    assert kernels[ZERO]["serving"] == "1" and kernels[SAMPLER]["compile s (all phases)"] == "0.733", out
    if columns >= 120:
        key = kernels[ZERO]["last key"]
        assert key.endswith("…") and len(key.replace(" ", "")) <= 80, (key, out)
        assert LONG_KEY.replace(" ", "").startswith(key.replace(" ", "")[:-1]), (key, out)
    recent = {row["kernel"].replace(" ", ""): row for row in found["Recent serving-phase compiles"]}
    for name, row in recent.items():  # beside time and why: the longest whole from 130, the others from 100
        if columns >= 130 or (columns >= 100 and name != SAMPLER):
            assert unbroken(out, row["kernel"]), (name, out)
        else:
            assert unbroken(out, row["kernel"]) or broken_at_boundaries(row["kernel"], name), (row["kernel"], out)


@pytest.mark.parametrize("columns", [80, 90, 100, 130])
def test_status_names_the_rank_of_each_serving_compile_at_80_columns(sidecar: str, columns: int) -> None:
    """Below 100 columns the serving compiles' ``rank`` was left out; under tensor parallelism
    which rank compiled is the first question. Now ``rank`` is there at every width, and below 100
    columns the ``time`` is what is left out (the dim line says so, not rank)."""
    out = status(sidecar, columns)
    recent = tables(out)["Recent serving-phase compiles"]
    assert sorted((row["rank"], row["kernel"].replace(" ", "")) for row in recent) == [("1", SAMPLER), ("1", ZERO)]
    assert ("time" in recent[0]) is (columns >= 100), out
    flat = " ".join(out.split())
    said = "(the Kernels' last compile, the serving compiles' time, the recompiles' seconds left out below 100 columns)"
    assert (said in flat) is (columns < 100), out
    assert "time and rank" not in flat


@pytest.mark.parametrize("columns", [80, 100])
def test_an_empty_sidecar_prints_no_left_out_notes(tmp_path: Path, columns: int) -> None:
    """Against a journal with no events, ``status`` printed "narrow terminal: some columns left
    out" and the 100-column note under two tables without rows. A note now follows only a table
    with rows that left a column out."""
    jdir = tmp_path / "journal"
    with Journal(jdir):
        pass
    with serving(jdir) as url:
        res = CliRunner().invoke(app, ["status", "--url", url, "--token", TOKEN], env={"COLUMNS": str(columns)})
    assert res.exit_code == 3, res.output  # NOT READY: no worker
    assert "left out" not in res.stdout and "narrow terminal" not in res.stdout, res.stdout
    assert {"Ranks", "Kernels"} <= set(tables(res.stdout)), res.stdout


@pytest.mark.parametrize("columns", [80, 100])
def test_coverage_keeps_argument_classes_whole(tmp_path: Path, columns: int) -> None:
    """At 100 columns ``jitwatch coverage`` split ``kv_cache_ptr:*fp16:ali│gned16`` in its ``met
    only in serving`` column. A real compile-only Triton kernel warmed with a 16-byte-aligned fp32
    pointer and met in serving with an fp16 one: each ``argument:class`` is whole, or broken after
    one of its own ``:``; the numbers' columns are no wider than their header's longest word."""
    import torch

    from jitwatch.testing import fresh_kernel_cache, monitored

    fresh_kernel_cache(copy_kv_cache_kernel)  # each run compiles (Triton's in-process cache)
    jdir = tmp_path / "journal"
    with monitored("warn", journal_dir=jdir, triton_cache_dir=tmp_path / "triton") as h:
        with h.monitor.warmup():
            x = torch.zeros(64)
            copy_kv_cache_kernel.warmup(x, x, 64, BLOCK=64, grid=(1,))
        with h.monitor.request():
            y = torch.zeros(64, dtype=torch.float16)[1:]  # an fp16 pointer, not 16-byte aligned
            copy_kv_cache_kernel.warmup(y, y, 63, BLOCK=64, grid=(1,))
        h.monitor.flush()
    res = CliRunner().invoke(app, ["coverage", "--journal-dir", str(jdir)], env={"COLUMNS": str(columns)})
    assert res.exit_code == 0, res.output
    out = res.stdout
    assert max(len(line) for line in out.splitlines()) <= columns, out
    title = "Specialization coverage (keys compiled before serving / keys needed)"
    (row,) = tables(out)[title]
    assert row["kernel"] == "copy_kv_cache_kernel", out
    met = row["met only in serving (first 6)"]
    tokens = [t for t in re.split(r",\s*", met) if t]
    assert any(t.replace(" ", "").startswith("kv_cache_ptr:*fp16") for t in tokens), out
    for token in tokens:
        assert unbroken(out, token) or broken_at_boundaries(token, token.replace(" ", "")), (token, out)
    widths = header_widths(out, title)
    assert widths["keys"] <= 4 and widths["coverage"] <= len("coverage"), (widths, out)


@pytest.mark.parametrize("columns", [80, 100])
def test_demo_summary_keeps_kernel_names_whole(sidecar: str, columns: int) -> None:
    """The demo's summary at 80 columns showed ``slot_mapping_k│ernel`` and
    ``make_sampler.<│locals>.sample│_probs`` beside ``warmup compiles`` and ``serving compiles``
    columns of ~14 characters for a one-digit count. From the sidecar's real ``/jit``: the counts'
    columns are as wide as ``compiles``, each kernel name whole (at 80 the longest broken after a ``.``)."""
    from rich.console import Console

    from jitwatch.demo.runner import DemoReport, print_summary

    jit = httpx.get(f"{sidecar}/jit", headers={"Authorization": f"Bearer {TOKEN}"}).json()
    report = DemoReport(journal_dir=Path("/tmp/demo-9400"), url=sidecar, jit=jit)
    console = Console(record=True, width=columns)
    print_summary(report, console)
    out = console.export_text()
    title = "jitwatch demo: compiles by phase (from /jit)"
    rows = tables(out)[title]
    kernels = {row["kernel"].replace(" ", ""): row["kernel"] for row in rows}
    assert set(kernels) == {SAMPLER, ZERO, SLOT}, out
    for name, shown in kernels.items():  # at 80 the longest is broken after a "."
        assert shown == name or (columns < 100 and broken_at_boundaries(shown, name)), (shown, out)
    widths = header_widths(out, title)
    assert widths["warmup compiles"] == widths["serving compiles"] == len("compiles"), (widths, out)
    assert max(len(line) for line in out.splitlines() if line.startswith(("┏", "│"))) <= columns, out


def test_a_text_column_keeps_its_floor_before_number_headers_go_on_one_line() -> None:
    """``jitwatch status``'s Ranks table at 80 columns (host, pid, tp/pp/dp left out): the number
    headers (``warmup compiles``, ``serving compiles``, ``first req``) went on one line at the cost
    of the state column, 11 characters wide, less than its floor (TEXT_FLOOR, a date): an exited
    rank's ``exited (MemoryError) (last seen …)`` took 7 lines with ``MemoryErro`` / ``r`` folded
    mid-word. The headers now wrap at their spaces unless the text keeps its floor."""
    from rich.console import Console

    from jitwatch.tables import TEXT_FLOOR, Grid

    columns = ["#rank", "state", "*host", "*#pid", "*#tp/pp/dp", "#warmup", "#warmup compiles", "#serving compiles"]
    grid = Grid("Ranks", [*columns, "#first req"], narrow=True)
    grid.add(
        "1", "exited (MemoryError) (last seen 2026-12-04 18:18:02 UTC)", "vm", "1", "-/-/-", "0.000s", "0", "0", "-"
    )
    grid.add("2", "serving", "vm", "2", "-/-/-", "0.000s", "0", "0", "-")
    console = Console(width=80, record=True)
    console.print(grid.fit(80))
    text = console.export_text()
    assert "MemoryError" in text, text
    state_width = len(text.splitlines()[1].split("┳")[1])
    assert state_width >= TEXT_FLOOR, text
    assert max(len(line) for line in text.splitlines()) <= 80


@pytest.mark.parametrize("columns", [40, 50, 60, 70])
def test_coverage_below_80_columns_cuts_no_value(tmp_path: Path, columns: int) -> None:
    """Below 80 columns the number columns kept their headers' words and rich cut what did not fit
    out of the values: at 50 columns the keys ``1/2`` read ``1/`` (another number, no ``…``), at 40
    the backend ``trit`` and the kernel ``sca`` / ``cop``. A header now folds mid-word before a value
    is cut: every value whole, each table line no wider than the terminal and ending in its border."""
    import torch

    from jitwatch.testing import fresh_kernel_cache, monitored

    fresh_kernel_cache(copy_kv_cache_kernel)
    jdir = tmp_path / "journal"
    with monitored("warn", journal_dir=jdir, triton_cache_dir=tmp_path / "triton") as h:
        with h.monitor.warmup():
            x = torch.zeros(64)
            copy_kv_cache_kernel.warmup(x, x, 64, BLOCK=64, grid=(1,))
        y = torch.zeros(64, dtype=torch.float16)[1:]
        copy_kv_cache_kernel.warmup(y, y, 63, BLOCK=64, grid=(1,))
        h.monitor.flush()
    res = CliRunner().invoke(app, ["coverage", "--journal-dir", str(jdir)], env={"COLUMNS": str(columns)})
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    for line in lines:
        assert len(line) <= columns, (line, res.stdout)
        if line[:1] in "┏┃┡│└":
            assert line[-1] == {"┏": "┓", "┃": "┃", "┡": "┩", "│": "│", "└": "┘"}[line[0]], (line, res.stdout)
    body = [line for line in lines if line.startswith("│")]
    rows = [[c.strip() for c in line.strip("│").split("│")] for line in body]
    first = next(i for i, cells in enumerate(rows) if cells[0])  # the kernel table's row
    assert rows[first][0] == "triton" and rows[first][2:5] == ["1/2", "50%", "1"], res.stdout
    kernel = "".join(cells[1] for cells in rows[first:] if len(cells) == 6)
    assert kernel == "copy_kv_cache_kernel", res.stdout
