"""The statistics ``benchmarks/bench_cost_floor.py`` reports for the in-process pairing."""

from __future__ import annotations

import importlib.util
import os
import random
import sys
from types import ModuleType

import pytest

from tests._paths import ROOT

_OTEL_SDK_DISABLED = os.environ.get("OTEL_SDK_DISABLED")
"""As it was before the benchmark module was loaded."""


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    sys.path.insert(0, str(ROOT / "benchmarks"))  # the benchmark imports its sibling _common
    saved = os.environ.copy()  # _common sets OTEL_SDK_DISABLED for benchmark runs: not for the tests after this one
    try:
        spec = importlib.util.spec_from_file_location("bench_cost_floor", ROOT / "benchmarks" / "bench_cost_floor.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
        os.environ.clear()
        os.environ.update(saved)


def _rounds(n: int, added: float, floor: float, spread: float, seed: int) -> tuple[list[float], list[float]]:
    rng = random.Random(seed)
    return [added + rng.gauss(0, spread) for _ in range(n)], [floor + rng.gauss(0, spread) for _ in range(n)]


def test_the_interval_holds_the_ratio_and_narrows_with_more_rounds(bench: ModuleType) -> None:
    """A 90 % bootstrap interval of median(added) / median(floor) contains the point ratio, is
    reproducible (seeded), and is narrower for 400 rounds than for 40 of the same spread."""
    few = _rounds(40, 150.0, 120.0, 200.0, seed=1)
    many = _rounds(400, 150.0, 120.0, 200.0, seed=1)
    lo, hi = bench._ratio_ci90(*few)
    lo2, hi2 = bench._ratio_ci90(*many)
    point = bench.statistics.median(many[0]) / bench.statistics.median(many[1])
    assert lo2 <= point <= hi2
    assert hi2 - lo2 < hi - lo
    assert bench._ratio_ci90(*many) == [lo2, hi2]


def test_the_interval_covers_the_true_ratio_about_nine_times_in_ten(bench: ModuleType) -> None:
    """Over 40 independent runs of 100 rounds (true ratio 1.25), the interval covers 1.25 in
    roughly 90 % of them: at least 30 (a 90 % interval misses more than 10 of 40 with probability
    under 1 %), and not in every run (then it would be far too wide to resolve a target)."""
    covered = 0
    for seed in range(40):
        interval = bench._ratio_ci90(*_rounds(100, 150.0, 120.0, 60.0, seed=100 + seed), resamples=400)
        assert interval is not None
        covered += interval[0] <= 1.25 <= interval[1]
    assert 30 <= covered < 40


def test_no_interval_for_too_few_rounds_or_a_floor_at_zero(bench: ModuleType) -> None:
    """Under 10 rounds, unequal lists, or a floor whose median is not positive in most resamples:
    ``None``, not a meaningless interval."""
    assert bench._ratio_ci90([1.0] * 9, [1.0] * 9) is None
    assert bench._ratio_ci90([1.0] * 20, [1.0] * 19) is None
    assert bench._ratio_ci90(*_rounds(50, 100.0, 0.0, 50.0, seed=2)) is None


def test_loading_the_benchmark_leaves_the_environment_as_it_was(bench: ModuleType) -> None:
    """The benchmarks' ``_common`` disables the OpenTelemetry SDK for their runs; loading them here
    must not disable it for the tests that run after this module (the warmup-span tests did fail)."""
    assert bench.os.environ is os.environ and os.environ.get("OTEL_SDK_DISABLED") == _OTEL_SDK_DISABLED
