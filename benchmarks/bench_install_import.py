"""Import-time cost of ``jitwatch.install()``: every backend enabled vs none, side by side.

Each sample is a fresh Python process that times ``import jitwatch; jitwatch.install()``
(``time.perf_counter``, in the process) and lists the heavy modules that are loaded afterwards.
Two arms, alternated per repetition so machine load hits both alike:

* ``none``: ``JITWATCH_BACKENDS=none``;
* ``all``: the default, every built-in backend (Triton, torch.compile, CuTeDSL, TileLang,
  FlashInfer), with the DSL libraries *installed* (``--dsl-site``, default ``.venv-dsl/site``) but
  not imported by the host: each backend must register a deferred hook and import nothing.

Also one process per DSL library that imports it after ``install()``, timing that import with and
without jitwatch's deferred hook waiting for it (what the hook adds to the host's own import).

Writes ``--out`` (JSON); ``docs/benchmarks.md`` quotes it. No assertion on any timing.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from _common import REPO, scratch_dir, summary, write_result

HEAVY = ("torch", "triton", "cutlass", "tilelang", "tvm_ffi", "flashinfer", "deep_gemm", "numpy")

PROBE = """
import json, sys, time
t0 = time.perf_counter()
import jitwatch
mon = jitwatch.install(tracer_provider=False)
t1 = time.perf_counter()
states = {n: s.state for n, s in mon.backend_statuses.items()}
lib = sys.argv[1] if len(sys.argv) > 1 else ""
t_lib = None
if lib:
    t2 = time.perf_counter()
    __import__(lib)
    t_lib = time.perf_counter() - t2
    states = {n: s.state for n, s in mon.backend_statuses.items()}
print(json.dumps({"install_s": t1 - t0, "states": states, "import_lib_s": t_lib,
                  "heavy": sorted({m.split(".")[0] for m in sys.modules} & set(HEAVY_NAMES))}))
jitwatch.uninstall()
""".replace("HEAVY_NAMES", repr(HEAVY))


def sample(backends: str | None, site: Path, lib: str = "") -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JITWATCH_")}
    paths = [str(REPO), str(site), str(site / "nvidia_cutlass_dsl" / "dsl_packages")]
    env.update(
        PYTHONPATH=os.pathsep.join(paths), JITWATCH_DIR=str(scratch_dir("jw-bench-import-")), OTEL_SDK_DISABLED="true"
    )
    if backends is not None:
        env["JITWATCH_BACKENDS"] = backends
    out = subprocess.run(
        [sys.executable, "-c", PROBE, *([lib] if lib else [])], env=env, capture_output=True, text=True, timeout=300
    )
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-2000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--dsl-site", type=Path, default=REPO / ".venv-dsl" / "site")
    ap.add_argument("--lib-reps", type=int, default=3)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()

    arms: dict[str, list[dict[str, Any]]] = {"none": [], "all": []}
    for _ in range(args.reps):
        arms["none"].append(sample("none", args.dsl_site))
        arms["all"].append(sample(None, args.dsl_site))
    libs: dict[str, Any] = {}
    for lib in ("cutlass", "tilelang", "flashinfer"):
        with_hook, without = [], []
        for _ in range(args.lib_reps):
            with_hook.append(sample(None, args.dsl_site, lib))
            without.append(sample("none", args.dsl_site, lib))
        libs[lib] = {
            "import_with_jitwatch_waiting_s": summary([s["import_lib_s"] for s in with_hook]),
            "import_without_jitwatch_backends_s": summary([s["import_lib_s"] for s in without]),
            "states_after_import": with_hook[-1]["states"],
        }
    payload = {
        "install_s": {arm: summary([s["install_s"] for s in xs]) for arm, xs in arms.items()},
        "heavy_modules_after_install": {arm: xs[-1]["heavy"] for arm, xs in arms.items()},
        "backend_states": {arm: xs[-1]["states"] for arm, xs in arms.items()},
        "dsl_library_import": libs,
        "reps": args.reps,
    }
    write_result(args.out, "install_import", payload)
    for arm in ("none", "all"):
        s = payload["install_s"][arm]
        print(
            f"install() {arm:>4}: median {s['median'] * 1e3:.1f} ms (p90 {s['p90'] * 1e3:.1f} ms); "
            f"heavy modules loaded: {payload['heavy_modules_after_install'][arm]}"
        )
    print("states (all):", payload["backend_states"]["all"])
    for lib, d in libs.items():
        print(
            f"import {lib}: with jitwatch waiting {d['import_with_jitwatch_waiting_s']['median']:.2f} s, "
            f"without {d['import_without_jitwatch_backends_s']['median']:.2f} s; states {d['states_after_import']}"
        )


if __name__ == "__main__":
    main()
