"""``jitwatch status`` names each row's backend at every terminal width, 80 columns included: a
Triton kernel and a torch.compile graph of the same name are two rows a reader can tell apart in
its Kernels, ``Recent serving-phase compiles`` and ``Recompiles by reason`` tables. A real journal
in a temporary directory, served by the real sidecar (uvicorn on 127.0.0.1), printed by the real
CLI (typer's runner with ``COLUMNS``), as ``jitwatch coverage``'s backend column is tested."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from typer.testing import CliRunner

from jitwatch.cli import app
from jitwatch.core.events import Event, EventKind, Phase
from jitwatch.store.journal import Journal
from tests.test_cli import TOKEN, serving

T0 = 1_700_000_000.0
GUARD = "0/0: tensor 'logits' size mismatch at index 0. expected 1, actual 2"
TRITON_KEY = "[('*fp32', 'D'), ('i32', 'D')]{'num_warps': 4}"


def ev(kind: EventKind, ts: float, **fields: object) -> Event:
    return Event(kind=kind, ts=ts, rank=0, pid=100, host="node-a", **fields)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def sidecar(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One name, two backends: the Triton kernel and the torch.compile graph ``sample_probs``, each
    warmed and compiled once more in serving (in requests 7 and 8); the graph's serving compile is a
    recompile (Dynamo's guard failure, reason class ``size mismatch``)."""
    jdir = tmp_path_factory.mktemp("journal")
    with Journal(jdir) as j:
        j.write(
            [
                ev(EventKind.WORKER_START, T0, attrs={"mode": "warn", "tp_rank": 0}),
                ev(EventKind.WARMUP_START, T0 + 1, phase=Phase.WARMUP),
                ev(EventKind.COMPILE, T0 + 2, phase=Phase.WARMUP, backend="triton", kernel="sample_probs",
                   key="k-warm", duration_s=0.3),
                ev(EventKind.COMPILE, T0 + 2.5, phase=Phase.WARMUP, backend="torch_compile", kernel="sample_probs",
                   key="0/0", duration_s=1.3),
                ev(EventKind.WARMUP_COMPLETE, T0 + 3, phase=Phase.SERVING, duration_s=2.0),
                ev(EventKind.COMPILE, T0 + 4, phase=Phase.SERVING, backend="triton", kernel="sample_probs",
                   key=TRITON_KEY, duration_s=0.2, attrs={"request_id": 7}),
                ev(EventKind.COMPILE, T0 + 5, phase=Phase.SERVING, backend="torch_compile", kernel="sample_probs",
                   key="0/1", duration_s=0.9,
                   attrs={"request_id": 8, "reason": GUARD, "reason_class": "size mismatch", "compile_id": "0/1"}),
            ]
        )  # fmt: skip
    with serving(jdir) as base:
        yield base


def tables(out: str) -> dict[str, list[dict[str, str]]]:
    """Each rich table of ``out`` by title: its rows as ``{column: cell}``, a cell folded over lines
    joined by spaces. A row starts at a line whose ``backend`` cell is filled (that column is never
    folded, so only a row's first line has it); a table without that column is one row a line."""
    found: dict[str, list[dict[str, str]]] = {}
    title = ""
    head: list[list[str]] = []
    rows: list[list[str]] = []
    for line in out.splitlines():
        if line.startswith("┃"):
            cells = [c.strip() for c in line.strip("┃").split("┃")]
            head = [[*h, c] for h, c in zip(head, cells, strict=True)] if head else [[c] for c in cells]
        elif line.startswith("│"):
            names = [" ".join(x for x in h if x) for h in head]
            cells = [c.strip() for c in line.strip("│").split("│")]
            starts = "backend" not in names or cells[names.index("backend")]
            if starts or not rows:
                rows.append(cells)
            else:
                rows[-1] = [" ".join(x for x in (a, b) if x) for a, b in zip(rows[-1], cells, strict=True)]
        elif line.startswith("└"):
            names = [" ".join(x for x in h if x) for h in head]
            found[title] = [dict(zip(names, row, strict=True)) for row in rows]
            head, rows = [], []
        elif not line.startswith(("┏", "┡")):
            title = line.strip()
    return found


def pick(rows: list[dict[str, str]], *columns: str) -> list[tuple[str, ...]]:
    return sorted(tuple(row[c] for c in columns) for row in rows)


@pytest.mark.parametrize("columns", [80, 100, 130, 200])
def test_every_status_row_names_its_backend(sidecar: str, columns: int) -> None:
    """Below 120 columns the backend column was left out of all three tables: at 80 or 100 the
    Triton row and the torch.compile row read ``sample_probs`` both, with the same counts. Now each
    table has a backend column before the kernel's, never folded, at every width; no line is wider
    than the terminal and nothing is cut with an ellipsis. To leave the kernel and ``why`` room
    beside it, below 100 columns the Kernels' ``last compile``, the serving compiles' ``time`` (not
    their ``rank``) and the recompiles' ``seconds`` are left out, and a dim line says so."""
    res = CliRunner().invoke(app, ["status", "--url", sidecar, "--token", TOKEN], env={"COLUMNS": str(columns)})
    assert res.exit_code == 0, res.output
    out = res.stdout
    assert max(len(line) for line in out.splitlines()) <= columns, out
    assert "…" not in out
    found = tables(out)
    assert set(found) == {"Ranks", "Kernels", "Recent serving-phase compiles", "Recompiles by reason"}, out

    kernels = found["Kernels"]
    assert list(kernels[0])[:2] == ["backend", "kernel"], out
    assert pick(kernels, "backend", "kernel", "warmup", "serving") == [
        ("torch_compile", "sample_probs", "1", "1"),
        ("triton", "sample_probs", "1", "1"),
    ], out
    recent = found["Recent serving-phase compiles"]
    names = list(recent[0])
    assert names.index("kernel") == names.index("backend") + 1, out
    assert pick(recent, "backend", "kernel", "request") == [
        ("torch_compile", "sample_probs", "8"),
        ("triton", "sample_probs", "7"),
    ], out
    why = {row["backend"]: row["why"].replace(" ", "") for row in recent}
    assert why == {"torch_compile": GUARD.replace(" ", ""), "triton": TRITON_KEY.replace(" ", "")}, out
    reasons = found["Recompiles by reason"]
    assert list(reasons[0])[:2] == ["backend", "function"], out
    assert pick(reasons, "backend", "function", "reason class", "count") == [
        ("torch_compile", "sample_probs", "size mismatch", "1")
    ], out

    tight = columns < 100
    assert ("last compile" in kernels[0]) is not tight, out
    assert ("time" in recent[0]) is not tight and "rank" in recent[0], out  # rank at every width
    assert ("seconds" in reasons[0]) is not tight, out
    said = "(the Kernels' last compile, the serving compiles' time, the recompiles' seconds left out below 100 columns)"
    assert (said in " ".join(out.split())) is tight, out
    if not tight:
        assert {row["time"] for row in recent} == {"2023-11-14 22:13:24 UTC", "2023-11-14 22:13:25 UTC"}, out
        assert pick(reasons, "backend", "seconds") == [("torch_compile", "0.900")], out
    assert ("last key" in kernels[0]) is (columns >= 120), out  # the secondary columns, as before
