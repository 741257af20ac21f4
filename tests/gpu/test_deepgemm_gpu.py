"""DeepGEMM on a real GPU (H200): issue 12's scenario — a warmup covering one GEMM configuration, a
serving request whose shape needs another (a compile), and a second process that finds both in
DeepGEMM's disk cache — with jitwatch's records compared with DeepGEMM's own view: its
``Running NVCC command`` lines (``DG_JIT_PRINT_COMPILER_COMMAND=1``, one per compile) and the
entries of its cache directory (``kernel.<name>.<digest>/kernel.cu``, ``kernel.cubin``).

Run with ``scripts/gpu/deepgemm.sh run`` (builds DeepGEMM from source against the machine's torch;
see that script). Writes records, timings and the ``/jit`` document to
``$JITWATCH_GPU_OUT/deepgemm.json``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.backends import dsl_env

pytestmark = [pytest.mark.gpu, pytest.mark.dsl]
WORKER = Path(__file__).resolve().parents[1] / "backends" / "deepgemm" / "dg_worker.py"
NVCC = re.compile(r"Running NVCC command: .*? (\S+)/kernel\.cu -cubin")


def run(tmp_path: Path, n: int, env: dict[str, str]) -> tuple[dict[str, Any], list[str]]:
    out_file = tmp_path / f"worker-{n}.json"
    full = {k: v for k, v in os.environ.items() if not k.startswith(("JITWATCH_", "OTEL_"))}
    full.update(OTEL_SDK_DISABLED="true", PYTHONUNBUFFERED="1", **env)
    proc = subprocess.run(
        [sys.executable, str(WORKER), str(out_file)], env=full, capture_output=True, text=True, timeout=400
    )
    assert proc.returncode == 0, f"worker failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    return json.loads(out_file.read_text()), NVCC.findall(proc.stdout)


def test_deepgemm_warmup_serving_and_disk_cache_on_the_gpu(tmp_path: Path) -> None:
    dsl_env.require("deep_gemm")
    journal, cache = tmp_path / "journal", tmp_path / "dg-cache"
    env = {"JITWATCH_DIR": str(journal), "DG_JIT_CACHE_DIR": str(cache), "DG_JIT_PRINT_COMPILER_COMMAND": "1"}
    first, nvcc_1 = run(tmp_path, 1, env)
    second, nvcc_2 = run(tmp_path, 2, env)
    status = dsl_env.jit_status(journal, backend="deepgemm")
    dsl_env.save("deepgemm", {"first": first, "second": second, "nvcc": [nvcc_1, nvcc_2], "jit": status})

    assert (first["before"], first["after"]) == ("waiting", "active")
    assert first["hooks"] == ["DG_JIT_CACHE_DIR watcher"] and first["degraded"] is None
    assert first["hook_errors"] == second["hook_errors"] == 0
    for label in ("warmup", "serving", "serving_warmed"):
        assert first["library"][f"{label}_rel_err"] < 1e-2 and second["library"][f"{label}_rel_err"] < 1e-2
    # DeepGEMM's own view of the first process: two NVCC runs, two new cache entries
    lib = first["library"]
    new = sorted(set(lib["entries_after"]) - set(lib["entries_before"]))
    assert lib["entries_before"] == {} and len(new) == len(nvcc_1) == 2
    warm, serving = first["records"]
    assert sorted(f"kernel.{r['name']}.{r['key']}" for r in (warm, serving)) == new
    assert (warm["phase"], serving["phase"], serving["request"]) == ("warmup", "serving", None)
    assert warm["name"] == serving["name"] == "sm90_bf16_gemm" and warm["cache_hit"] is serving["cache_hit"] is False
    for r in (warm, serving):
        files = lib["entries_after"][f"kernel.{r['name']}.{r['key']}"]
        assert r["duration_s"] == pytest.approx(files["kernel.cubin"] - files["kernel.cu"], abs=1e-3)
        assert r["duration_s"] > 0.5 and r["attrs"]["spec"] and r["attrs"]["cubin_bytes"] > 0
    assert ", 4096, 7168," in warm["attrs"]["spec"] and ", 2048, 7168," in serving["attrs"]["spec"]
    assert first["seconds"]["warmup"] >= warm["duration_s"] and first["seconds"]["serving"] >= serving["duration_s"]
    # the second process: both configurations on disk, nothing compiled, nothing recorded
    assert nvcc_2 == [] and second["records"] == []
    assert second["library"]["entries_after"] == second["library"]["entries_before"] == lib["entries_after"]
    # /jit agrees: two compiles of sm90_bf16_gemm, one of them in serving
    (kernel,) = [k for k in status["kernels"] if k["name"] == "sm90_bf16_gemm"]
    assert kernel["compiles_serving"] == 1
