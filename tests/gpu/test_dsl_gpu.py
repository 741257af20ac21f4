"""DSL backends on a real GPU (H200): the scenario of issue 12 per library — a warmup covering one
shape, a serving call with a new shape/dtype that compiles, and a second process that loads from
the library's own cache — with jitwatch's records compared with the library's own view. Run one
library per device call with ``scripts/gpu/<library>.sh`` (the wheels travel with it; see that
script). Each test writes its records, timings and the ``/jit`` document to ``$JITWATCH_GPU_OUT``
(docs/benchmarks.md quotes them)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.backends import dsl_env
from tests.backends.cutedsl.test_cutedsl import LIBRARY_LINE
from tests.backends.cutedsl.test_cutedsl import WORKER as CUTE_WORKER

pytestmark = [pytest.mark.gpu, pytest.mark.dsl]


def test_cutedsl_warmup_serving_and_file_cache_on_the_gpu(tmp_path: Path) -> None:
    dsl_env.require("cutlass")
    journal = tmp_path / "journal"
    env = {
        "JITWATCH_DIR": str(journal),
        "CUTE_DSL_CACHE_DIR": str(tmp_path / "cute-cache"),
        "CUTE_DSL_LOG_LEVEL": "20",
        "CUTE_DSL_LOG_TO_CONSOLE": "1",
    }
    compiled, err_c = dsl_env.run_worker(CUTE_WORKER, "compile", env=env)
    first, err_1 = dsl_env.run_worker(CUTE_WORKER, "call", env=env)
    second, err_2 = dsl_env.run_worker(CUTE_WORKER, "call", env=env)
    lib_c, lib_1, lib_2 = (LIBRARY_LINE.findall(e) for e in (err_c, err_1, err_2))
    status = dsl_env.jit_status(journal, backend="cutedsl")
    dsl_env.save(
        "cutedsl",
        {"compile": compiled, "call_1": first, "call_2": second, "library_lines": [lib_c, lib_1, lib_2], "jit": status},
    )
    # cute.compile: warmup 32 x fp32, serving 64 x fp16; both real compiles, and the kernel ran
    warm, serving = compiled["records"]
    assert lib_c == [("miss", warm["key"]), ("miss", serving["key"])]
    assert (warm["phase"], serving["phase"], serving["request"]) == ("warmup", "serving", "req-cute-1")
    assert warm["cache_hit"] is False and serving["cache_hit"] is False
    assert serving["attrs"]["spec"]["args"][0]["dtype"] == "Float16"
    assert re.fullmatch(r"sm_90a?", str(warm["attrs"]["arch"]))
    assert compiled["library"]["result_ok"] is True
    # JIT on call: a compile that writes the file cache, then a second process that loads it
    (r1,), (r2,) = first["records"], second["records"]
    assert lib_1 == [("miss", r1["key"])] and lib_2 == [("hit IN-FILE", r2["key"])]
    assert first["library"]["launch"] == second["library"]["launch"] == "ok"
    assert (r1["cache_hit"], r2["cache_hit"]) == (False, True)
    (cache_file,) = second["library"]["cache_files"]
    assert r2["attrs"]["module_hash"] in cache_file
    # /jit agrees: 4 compiles of add_one, one of them in serving, one a cache load
    (kernel,) = [k for k in status["kernels"] if k["name"] == "add_one"]
    assert kernel["compiles_serving"] == 1
    assert sum(1 for r in (warm, serving, r1, r2) if r["cache_hit"]) == 1


def test_tilelang_warmup_serving_and_disk_cache_on_the_gpu(tmp_path: Path) -> None:
    from tests.backends.tilelang.test_tilelang import WORKER as TL_WORKER
    from tests.backends.tilelang.test_tilelang import check_against_library

    dsl_env.require("tilelang")
    journal = tmp_path / "journal"
    env = {"JITWATCH_DIR": str(journal), "TILELANG_CACHE_DIR": str(tmp_path / "tl-cache")}
    runs = [dsl_env.run_worker(TL_WORKER, "serve", env=env)[0] for _ in range(3)]
    status = dsl_env.jit_status(journal, backend="tilelang")
    dsl_env.save("tilelang", {"runs": runs, "jit": status})
    first, second, third = runs
    for out in runs:
        check_against_library(out)
        assert out["hook_errors"] == 0 and out["degraded"] is None
        lib = out["library"]
        assert lib["warmup_result_ok"] is True and lib["serving_result_ok"] is True
    warm, serving = first["records"]
    assert (warm["cache_hit"], serving["cache_hit"]) == (False, False)
    assert (warm["phase"], serving["phase"], serving["request"]) == ("warmup", "serving", "req-tl-1")
    assert '"arch":"sm_90' in warm["attrs"]["target"]
    warm2 = second["records"][0]
    assert (warm2["key"], warm2["cache_hit"]) == (warm["key"], True)
    # from the third process on every kernel loads (TileLang 0.1.15's out_idx quirk costs one more compile)
    assert [r["cache_hit"] for r in third["records"]] == [True, True]
    (kernel,) = [k for k in status["kernels"] if k["name"] == "add_one_kernel"]
    assert kernel["disk_cache_hits"] == sum(1 for out in runs for r in out["records"] if r["cache_hit"])


def test_flashinfer_builds_and_loads_on_the_gpu(tmp_path: Path) -> None:
    from tests.backends.flashinfer.test_flashinfer import BUILDING
    from tests.backends.flashinfer.test_flashinfer import WORKER as FI_WORKER

    dsl_env.require("flashinfer")
    journal = tmp_path / "journal"
    env = {"JITWATCH_DIR": str(journal), "FLASHINFER_WORKSPACE_BASE": str(tmp_path / "fi-workspace")}
    (first, err1), (second, err2) = (dsl_env.run_worker(FI_WORKER, "serve", env=env, timeout=900) for _ in range(2))
    status = dsl_env.jit_status(journal, backend="flashinfer")
    dsl_env.save("flashinfer", {"first": first, "second": second, "jit": status})
    for out in (first, second):
        lib = out["library"]
        assert lib["warmup_result_ok"] is True and lib["serving_result_ok"] is True, lib
        assert out["hook_errors"] == 0
    names = [r["name"] for r in first["records"]]
    assert BUILDING.findall(err1) == names and BUILDING.findall(err2) == []
    assert [r["cache_hit"] for r in first["records"]] == [False] * len(names)
    assert [r["cache_hit"] for r in second["records"]] == [True] * len(names)
    assert first["records"][-1]["phase"] == "serving" and first["records"][-1]["request"] == "req-fi-1"
