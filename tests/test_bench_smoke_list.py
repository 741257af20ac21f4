"""Every benchmark script is run briefly in CI (issue 15, item 5: benchmarks never rot): by
``benchmarks/smoke.sh`` (``make bench-smoke``), by the Makefile's ``test-dsl`` target, or it is one
of the few named here that cannot run on a fresh CPU machine. A new ``benchmarks/*.py`` that none of
these runs fails this test instead of rotting unseen (``parallel_warmup.py`` did, 2026-12-04)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

NOT_IN_CI = {
    "bench_first_request.py": "needs a GPU (scripts/gpu/)",
    "diag_first_request.py": "needs a GPU (scripts/gpu/)",
    "callgrind_compiling_thread.py": "needs valgrind, which a fresh machine lacks",
}
HELPERS = {"_common.py", "_kernels.py", "summarize.py"}  # imported by the benchmarks, not run alone


def _scripts() -> set[str]:
    return {p.name for p in (ROOT / "benchmarks").glob("*.py")} - HELPERS


def test_every_benchmark_runs_in_ci_or_says_why_not() -> None:
    smoke = (ROOT / "benchmarks" / "smoke.sh").read_text()
    make = (ROOT / "Makefile").read_text()
    ran = {f"bench_{m}.py" for m in re.findall(r"^\s*run (\w+)", smoke, re.M)}
    ran |= set(re.findall(r"benchmarks/(\w+\.py)", smoke + make))
    missing = sorted(_scripts() - ran - set(NOT_IN_CI))
    assert not missing, f"benchmarks that CI never runs (add them to benchmarks/smoke.sh): {missing}"


def test_the_exceptions_exist() -> None:
    # a renamed or removed script must leave this list too, or it hides nothing but itself
    assert set(NOT_IN_CI) <= _scripts()
    assert all((ROOT / "benchmarks" / h).exists() for h in HELPERS)
