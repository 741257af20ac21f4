"""The FlashInfer backend against the real ``flashinfer-python`` on this CPU machine: FlashInfer's
JIT builds its modules with nvcc and ninja for ``FLASHINFER_CUDA_ARCH_LIST=9.0a`` without a GPU
(NVIDIA's nvcc wheels; ``scripts/make-dsl-env.sh`` gives them the toolkit layout FlashInfer links
against), and loads the built module, so builds, loads from FlashInfer's JIT cache, phases,
requests and error mode run for real. jitwatch's records are compared with the library's own view:
its ``Building JIT module <name>`` log line (cold builds only) and each module's ``.so`` in its
workspace (``cached_ops/<name>/<name>.so``: new, rewritten or untouched). GPU run:
``tests/gpu/test_dsl_gpu.py``."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.backends import dsl_env

WORKER = Path(__file__).resolve().parent / "fi_worker.py"
BUILDING = re.compile(r"Building JIT module (\w+)")
pytestmark = [pytest.mark.slow, pytest.mark.dsl]


@pytest.fixture(autouse=True)
def _library() -> None:
    dsl_env.require("flashinfer")
    if dsl_env.cuda_toolkit() is None and shutil.which("nvcc") is None:
        pytest.fail("FlashInfer's JIT needs nvcc: make dsl-env installs NVIDIA's nvcc wheel")


def run(tmp_path: Path, journal: str, **env: str) -> tuple[dict[str, Any], list[str]]:
    full = {
        "JITWATCH_DIR": str(tmp_path / journal),
        "FLASHINFER_WORKSPACE_BASE": str(tmp_path / "fi-workspace"),
        "FLASHINFER_CUDA_ARCH_LIST": "9.0a",
        **env,
    }
    out, err = dsl_env.run_worker(WORKER, "serve", env=full, timeout=900)
    return out, BUILDING.findall(err)


def test_builds_in_warmup_and_serving_then_a_second_process_loads_from_the_jit_cache(tmp_path: Path) -> None:
    first, built = run(tmp_path, "j1")
    assert (first["before"], first["after"]) == ("waiting", "active")
    assert first["hooks"][0] == "flashinfer.jit.core.JitSpec.build_and_load" and first["hook_errors"] == 0
    assert "flashinfer.jit.core.JitSpecNvcc.build" in first["hooks"]
    lib = first["library"]
    assert not any(k.endswith("_error") for k in lib), lib
    warm, serving = first["records"]
    # the library's own view: two cold builds, two new .so files, named as the records are
    assert built == [warm["name"], serving["name"]] == ["silu_and_mul", "gelu_tanh_and_mul"]
    assert lib["artifacts_before"] == {} and sorted(lib["artifacts_after"]) == sorted(built)
    assert (warm["cache_hit"], serving["cache_hit"]) == (False, False)
    assert (warm["phase"], serving["phase"], serving["request"]) == ("warmup", "serving", "req-fi-1")
    assert warm["key"] == "silu_and_mul" and warm["attrs"]["spec_type"] == "JitSpecNvcc"
    assert warm["attrs"]["aot"] is False and warm["attrs"]["library"].endswith("silu_and_mul.so")

    second, built2 = run(tmp_path, "j2")
    lib2 = second["library"]
    # nothing rebuilt: no build log line, every .so untouched; jitwatch: two loads
    assert built2 == [] and lib2["artifacts_before"] == lib2["artifacts_after"] == lib["artifacts_after"]
    assert [(r["name"], r["cache_hit"], r["phase"]) for r in second["records"]] == [
        ("silu_and_mul", True, "warmup"),
        ("gelu_tanh_and_mul", True, "serving"),
    ]
    assert max(r["duration_s"] for r in second["records"]) < min(r["duration_s"] for r in first["records"])

    third, _ = run(tmp_path, "j3", JITWATCH_MODE="error")
    assert "warmup_error" not in third["library"]
    assert third["library"]["serving_error"] == "ServingCompileError"


def test_processes_waiting_for_another_s_build_record_a_load(tmp_path: Path) -> None:
    """The ranks of one engine need the same module at once: FlashInfer builds it in one process
    under its file lock; the others wait, then run ninja, which finds the ``.so`` up to date, and
    load it. The ``.so`` was new to every one of them, so each recorded a build (``cache_hit:
    false``): N builds for one (found by an attack review). The waiters record a load now
    (``cache_hit: true``, ``built_elsewhere``), their wait as its duration."""
    import json
    import os
    import subprocess
    import sys

    race = Path(__file__).resolve().parent / "fi_race_worker.py"
    base = {k: v for k, v in os.environ.items() if not k.startswith(("JITWATCH_", "OTEL_"))}
    base.update(
        PYTHONPATH=dsl_env.pythonpath(race.parent),
        OTEL_SDK_DISABLED="true",
        FLASHINFER_WORKSPACE_BASE=str(tmp_path / "fi-workspace"),
        FLASHINFER_CUDA_ARCH_LIST="9.0a",
    )
    toolkit = dsl_env.cuda_toolkit()
    if toolkit is not None:
        base["CUDA_HOME"] = str(toolkit)
        base["PATH"] = os.pathsep.join([str(toolkit / "bin"), str(dsl_env.site() / "bin"), base.get("PATH", "")])
        base["LD_LIBRARY_PATH"] = os.pathsep.join([str(toolkit / "lib"), base.get("LD_LIBRARY_PATH", "")])
    procs = [
        subprocess.Popen(
            [sys.executable, str(race)],
            env={**base, "JITWATCH_DIR": str(tmp_path / f"j{i}")},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    outs = [p.communicate(timeout=900) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err[-3000:] for _, err in outs]
    built = [BUILDING.findall(err) for _, err in outs]
    assert sorted(len(b) for b in built) == [0, 1]  # the library's own view: one build, one wait
    results = [json.loads(out.strip().splitlines()[-1]) for out, _ in outs]
    for names, result in zip(built, results, strict=True):
        (record,) = result["records"]
        assert result["hook_errors"] == 0 and record["name"] == "silu_and_mul"
        if names:
            assert record["cache_hit"] is False and "built_elsewhere" not in record["attrs"]
        else:
            assert record["cache_hit"] is True and record["attrs"]["built_elsewhere"] is True
