"""Predictive coverage: exact keys (combinations), launch options, expected keys from a manifest or a
previous journal, never-warmed kernels of an imported module, and ``jitwatch coverage
--require-complete`` failing on an incomplete warmup and passing after replay (real compiles,
compile-only driver; real manifest export and replay)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from jitwatch.cli import app
from jitwatch.store.journal import Journal
from jitwatch.testing import fresh_kernel_cache, monitored
from jitwatch.views.coverage import coverage_for_journal
from jitwatch.warmup.manifest import export, load
from jitwatch.warmup.replay import replay
from tests._paths import TRITON_TESTS

sys.path.insert(0, str(TRITON_TESTS))
import kernels_fieldcases as kf

ALLOW = ["kernels_fieldcases"]


def _sample(top_k: bool, top_p: bool) -> None:
    kf.sample.warmup(
        torch.zeros(16 * 64), torch.empty(16, dtype=torch.int32), 16, 64, TOP_K=top_k, TOP_P=top_p, BLOCK=64, grid=(16,)
    )


def _copy(num_warps: int) -> None:
    kf.scale_copy.warmup(torch.zeros(1024), torch.empty(1024), 512, BLOCK=64, num_warps=num_warps, grid=(1,))


def _warmup() -> None:
    _sample(True, False)
    _sample(False, True)
    _copy(4)


def _serve() -> None:
    _sample(True, True)  # each flag value warmed, never together
    _copy(8)  # a launch option warmup never used


def run(cli: list[str]) -> tuple[int, str, str]:
    out = CliRunner().invoke(app, cli)
    return out.exit_code, out.stdout, out.stderr


@pytest.fixture(scope="module")
def run1(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Run 1: an incomplete warmup, then serving compiles; its manifest exported."""
    base = tmp_path_factory.mktemp("complete")
    fresh_kernel_cache(kf.sample, kf.scale_copy)
    with monitored(journal_dir=base / "j1", triton_cache_dir=base / "c1") as h:
        with h.monitor.warmup():
            _warmup()
        _serve()
        h.monitor.flush()
    _, problems = export(base / "j1", base / "m.json", allow=ALLOW)
    assert problems == {}
    return base


def test_combination_and_option_are_missing_though_every_argument_class_is_covered(run1: Path) -> None:
    with Journal(run1 / "j1", readonly=True) as j:
        report = coverage_for_journal(j)
    sample = report.by_kernel()["sample"]
    assert all(a.serving_only == [] for a in sample.arguments)  # per argument: nothing to see
    assert [(m.source, m.reason_kind, m.reason) for m in sample.missing] == [
        (
            "serving",
            "new_combination",
            "new combination (each class was warmed, not together): TOP_P: constexpr False → True",
        )
    ]
    copy = report.by_kernel()["scale_copy"]
    assert [(m.reason_kind, m.reason) for m in copy.missing] == [("option", "num_warps: 4 → 8")]
    assert "[num_warps]:=8" in copy.uncovered  # launch options are classes
    assert not report.complete


def test_require_complete_fails_then_passes_after_replay(run1: Path) -> None:
    code, out, err = run(["coverage", "--journal-dir", str(run1 / "j1"), "--require-complete"])
    assert code == 1
    assert "coverage incomplete: 2 expected keys not compiled before serving" in err
    assert (
        "  sample [serving]: new combination (each class was warmed, not together): TOP_P: constexpr False → True"
        in err
    )
    assert "  scale_copy [serving]: num_warps: 4 → 8" in err

    # Run 2 (new caches, new journal): the same warmup plus the manifest replayed → complete.
    fresh_kernel_cache(kf.sample, kf.scale_copy)
    with monitored(journal_dir=run1 / "j2", triton_cache_dir=run1 / "c2") as h:
        with h.monitor.warmup():
            _warmup()
            report = replay(load(run1 / "m.json"), allow=ALLOW)
        assert report.compiled == 2, report.results
        _serve()
        h.monitor.flush()
    for extra in ([], ["--manifest", str(run1 / "m.json")], ["--expect-journal", str(run1 / "j1")]):
        code, out, err = run(["coverage", "--journal-dir", str(run1 / "j2"), "--require-complete", *extra])
        assert code == 0, err
        assert "complete: every expected key was compiled before serving" in out


def test_predicts_from_a_manifest_before_any_serving_compile(run1: Path) -> None:
    """Run 3 warms without the manifest and serves nothing yet: the manifest predicts both compiles."""
    fresh_kernel_cache(kf.sample, kf.scale_copy)
    with monitored(journal_dir=run1 / "j3", triton_cache_dir=run1 / "c3") as h:
        with h.monitor.warmup():
            _warmup()
        h.monitor.flush()
    assert run(["coverage", "--journal-dir", str(run1 / "j3"), "--require-complete"])[0] == 0  # nothing served
    code, out, err = run(
        [
            "coverage",
            "--journal-dir",
            str(run1 / "j3"),
            "--require-complete",
            "--manifest",
            str(run1 / "m.json"),
            "--json",
        ]
    )
    assert code == 1
    body = json.loads(out)
    assert body["complete"] is False
    missing = {k["kernel"]: [(m["source"], m["reason"]) for m in k["missing"]] for k in body["kernels"]}
    assert missing == {
        "sample": [
            ("manifest", "new combination (each class was warmed, not together): TOP_P: constexpr False → True")
        ],
        "scale_copy": [("manifest", "num_warps: 4 → 8")],
    }
    code, _, err = run(
        ["coverage", "--journal-dir", str(run1 / "j3"), "--require-complete", "--expect-journal", str(run1 / "j1")]
    )
    assert code == 1 and "sample [journal]: new combination" in err


def test_never_warmed_kernels_of_a_module(run1: Path) -> None:
    code, _, err = run(
        [
            "coverage",
            "--journal-dir",
            str(run1 / "j1"),
            "--module",
            "kernels_fieldcases",
            "--allow",
            "kernels_fieldcases",
            "--require-complete",
        ]
    )
    assert code == 1
    for name in ("slot_mapping", "slot_mapping_dns", "zero_kv_blocks", "tiled_rows", "tuned_scale"):
        assert f"  {name} [module]: never warmed (no compile of this kernel before serving)" in err
    assert "  sample [module]" not in err  # it was warmed (only in other combinations)
    # a module not imported yet and not under --allow is never imported
    refused = run(["coverage", "--journal-dir", str(run1 / "j1"), "--module", "jitwatch_not_a_module"])
    assert refused[0] == 2 and "not under an allowed prefix" in refused[2]


def test_module_kernels_leave_out_device_functions(tmp_path: Path) -> None:
    """``--module jitwatch.kernels.slot_mapping`` expected a compile of ``_slot_mapping_body``, the
    ``@triton.jit`` device function both slot-mapping kernels call: Triton compiles it inside its
    callers, never on its own, so ``--require-complete`` could never pass. The kernels it launches
    are still expected (an empty journal: every one missing)."""
    Journal(tmp_path / "j").close()
    mod = "jitwatch.kernels.slot_mapping"
    res = CliRunner().invoke(
        app, ["coverage", "--journal-dir", str(tmp_path / "j"), "--module", mod, "--allow", mod, "--json"]
    )
    assert res.exit_code == 0, res.output
    body = json.loads(res.stdout)
    assert body["complete"] is False
    missing = {k["kernel"]: [m["source"] for m in k["missing"]] for k in body["kernels"]}
    assert missing == {"slot_mapping_kernel": ["module"], "slot_mapping_kernel_specialized": ["module"]}, missing


def test_a_module_without_kernels_is_refused(tmp_path: Path) -> None:
    """``--module jitwatch.kernels`` (a package whose kernels are in its submodules) added no
    expected kernel and said nothing: a CI gate given a package checked nothing more than without
    it. A module that defines no ``@triton.jit`` kernel is one line, exit 2, naming the
    submodules of a package (read from its directory)."""
    Journal(tmp_path / "j").close()
    res = CliRunner().invoke(
        app, ["coverage", "--journal-dir", str(tmp_path / "j"), "--module", "jitwatch.kernels", "--allow", "jitwatch"]
    )
    assert res.exit_code == 2, res.output
    assert "jitwatch: --module jitwatch.kernels: defines no @triton.jit kernel (a package: submodules are not" in (
        res.output
    )
    assert (
        "--module jitwatch.kernels.kv_blocks" in res.output and "--module jitwatch.kernels.slot_mapping" in res.output
    )


_DEVICE_FUNCTION_PACKAGE = {
    "helpers.py": """
import triton
import triton.language as tl


@triton.jit
def twice(x):
    return x * 2
""",
    "user_attr.py": """
import triton
import triton.language as tl

from {pkg} import helpers


@triton.jit
def via_attr(src, dst, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(dst + offs, helpers.twice(tl.load(src + offs)))
""",
    "alias.py": """
import triton
import triton.language as tl


@triton.jit
def _helper(x):
    return x * 3


h = _helper


@triton.jit
def kern(src, dst, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(dst + offs, h(tl.load(src + offs)))
""",
    "both.py": """
import triton
import triton.language as tl


@triton.jit
def add_one(x):
    return x + 1


@triton.jit
def outer(src, dst, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(dst + offs, add_one(tl.load(src + offs)))


def launch(src, dst):
    add_one[(1,)](src)  # also launched on its own
""",
    "passed.py": """
import triton
import triton.language as tl


@triton.jit
def relu(x):
    return tl.maximum(x, 0)


@triton.jit
def act_kernel(src, dst, ACT: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(dst + offs, ACT(tl.load(src + offs)))


def launch(src, dst):
    act_kernel[(1,)](src, dst, ACT=relu, BLOCK=64)
""",
}


def test_module_device_functions_called_through_an_attribute_or_an_alias(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Device functions were found by the plain name a caller of the same module calls: one called
    through its module (``helpers.twice(x)``, defined in another module given too) or through an
    alias (``h = _helper``) was expected, listed never warmed, and ``--require-complete`` could never
    pass; a ``@triton.jit`` function its module also launches on its own (``add_one[grid](...)``) was
    left out, so the gate passed without it ever compiling; one passed to a launch as a constexpr
    (``act_kernel[grid](..., ACT=relu)``) was expected. Real modules, imported by the CLI."""
    pkg = f"jw_devfn_{tmp_path.name}"
    (tmp_path / pkg).mkdir()
    (tmp_path / pkg / "__init__.py").write_text("")
    for name, src in _DEVICE_FUNCTION_PACKAGE.items():
        (tmp_path / pkg / name).write_text(src.replace("{pkg}", pkg))
    monkeypatch.syspath_prepend(str(tmp_path))
    Journal(tmp_path / "j").close()
    args = ["coverage", "--journal-dir", str(tmp_path / "j"), "--allow", pkg, "--json"]
    for name in _DEVICE_FUNCTION_PACKAGE:
        args += ["--module", f"{pkg}.{name.removesuffix('.py')}"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    kernels = sorted(k["kernel"] for k in json.loads(res.stdout)["kernels"])
    assert kernels == ["act_kernel", "add_one", "kern", "outer", "via_attr"], kernels
