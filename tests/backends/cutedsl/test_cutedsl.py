"""The CuTeDSL backend against the real ``nvidia-cutlass-dsl`` on this CPU machine: CuTeDSL compiles
for ``CUTE_DSL_ARCH=sm_90a`` without a GPU (only launching needs one), and its file cache works,
so compiles, file-cache loads, phases, requests, error mode, uninstall and coexistence with a
vLLM-style wrapper all run for real. Each scenario runs in a fresh host process
(``cute_worker.py``); jitwatch's records are compared with the library's own log lines
(``CUTE_DSL_LOG_LEVEL=20``: ``JIT cache miss`` / ``JIT cache hit IN-FILE``) and cache directory.
The GPU run of the same worker is ``tests/gpu/test_dsl_gpu.py``."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.backends import dsl_env

WORKER = Path(__file__).resolve().parent / "cute_worker.py"
pytestmark = [pytest.mark.slow, pytest.mark.dsl]

LIBRARY_LINE = re.compile(r"JIT cache (miss|hit IN-FILE) function=\[(\w+)\]")


@pytest.fixture(autouse=True)
def _library() -> None:
    dsl_env.require("cutlass")


def run(tmp_path: Path, scenario: str, **env: str) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    full = {
        "JITWATCH_DIR": str(tmp_path / f"journal-{scenario}-{len(list(tmp_path.iterdir()))}"),
        "CUTE_DSL_CACHE_DIR": str(tmp_path / "cute-cache"),
        "CUTE_DSL_ARCH": "sm_90a",
        "CUTE_DSL_LOG_LEVEL": "20",
        "CUTE_DSL_LOG_TO_CONSOLE": "1",
        **env,
    }
    out, err = dsl_env.run_worker(WORKER, scenario, env=full)
    return out, LIBRARY_LINE.findall(err)


def test_cute_compile_in_warmup_then_a_new_shape_and_dtype_in_serving(tmp_path: Path) -> None:
    out, library = run(tmp_path, "compile")
    assert (out["before"], out["after"]) == ("waiting", "active")  # hooks went in at the host's import
    assert out["degraded"] is None and out["hook_errors"] == 0
    assert out["hooks"] == [
        "cutlass.base_dsl.compile_backend.CompilerBackend.compile",
        "cutlass.base_dsl.compile_backend.CompilerBackend._resolve_compile_cache",
    ]
    warm, serving = out["records"]
    # the library's view: two cache misses, for these two specializations, nothing on disk
    assert library == [("miss", warm["key"]), ("miss", serving["key"])]
    assert out["library"]["cache_files"] == []
    assert warm["name"] == serving["name"] == "add_one"
    assert (warm["phase"], warm["cache_hit"], warm["request"]) == ("warmup", False, None)
    assert (serving["phase"], serving["cache_hit"], serving["request"]) == ("serving", False, "req-cute-1")
    assert warm["attrs"]["spec"] == {"args": [{"type": "_Tensor", "shape": [32], "dtype": "Float32"}]}
    assert serving["attrs"]["spec"] == {"args": [{"type": "_Tensor", "shape": [64], "dtype": "Float16"}]}
    assert warm["attrs"]["arch"] == "sm_90a" and warm["attrs"]["cache_enabled"] is False
    assert warm["attrs"]["module_hash"] is None  # cute.compile hashes nothing: it never caches
    assert 0 < warm["duration_s"] <= out["seconds"]["warmup"]


def test_error_mode_raises_for_the_serving_compile_only(tmp_path: Path) -> None:
    out, library = run(tmp_path, "compile", JITWATCH_MODE="error")
    assert out["library"]["serving_error"] == "ServingCompileError"
    assert [r["phase"] for r in out["records"]] == ["warmup", "serving"]  # recorded, then raised
    assert len(library) == 2


def test_jit_on_call_compiles_then_a_second_process_loads_from_the_file_cache(tmp_path: Path) -> None:
    first, lib1 = run(tmp_path, "call")
    second, lib2 = run(tmp_path, "call")
    (r1,), (r2,) = first["records"], second["records"]
    # the library's own view: a miss that wrote one cache file, then a hit IN-FILE on that file
    assert lib1 == [("miss", r1["key"])] and lib2 == [("hit IN-FILE", r2["key"])]
    assert first["library"]["cache_files"] == second["library"]["cache_files"]
    (cache_file,) = first["library"]["cache_files"]
    assert r1["attrs"]["module_hash"] == r2["attrs"]["module_hash"] and r1["attrs"]["module_hash"] in cache_file
    assert (r1["cache_hit"], r2["cache_hit"]) == (False, True)
    assert r1["attrs"]["cache_enabled"] is True and r1["phase"] == "warmup"
    # without a GPU the launch fails with the library's own error, unchanged by the wrapper
    if first["library"]["launch"] != "ok":
        assert first["library"]["launch"] == "cutlass.base_dsl.common.DSLCudaRuntimeError"


@pytest.mark.parametrize("order", ["vllm-first", "jitwatch-first"])
def test_coexists_with_vllms_wrapper_of_cute_compile_and_uninstall_restores(tmp_path: Path, order: str) -> None:
    out, _ = run(tmp_path, f"coexist-{order}")
    lib = out["library"]
    assert lib["vllm_saw"] == ["vllm"] and lib["compiles_recorded"] == 1
    assert lib["wrapped_while_installed"] and lib["restored"]
    assert lib["vllm_saw_after_uninstall"] == ["vllm", "vllm"]


def test_backend_imports_nothing_of_cutedsl_until_the_host_does(tmp_path: Path) -> None:
    code = (
        "import sys, jitwatch\n"
        "mon = jitwatch.install(tracer_provider=False)\n"
        "assert mon.backend_statuses['cutedsl'].state == 'waiting', mon.backend_statuses\n"
        "assert not [m for m in sys.modules if m.split('.')[0] in ('cutlass', 'torch')], 'imported'\n"
        "jitwatch.uninstall()\n"
    )
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith("JITWATCH_")}
    env.update(PYTHONPATH=dsl_env.pythonpath(), JITWATCH_DIR=str(tmp_path), OTEL_SDK_DISABLED="true")
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
