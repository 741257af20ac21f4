"""Where the DSL libraries live for tests: ``.venv-dsl/site`` (built by ``make dsl-env``, i.e.
``scripts/make-dsl-env.sh``), or ``JITWATCH_TEST_DSL_SITE`` (the GPU scripts point it at
``/tmp/site``). Tests of a DSL backend run its library in a subprocess with this path; they skip
when the library is absent, unless ``JITWATCH_TEST_DSL_REQUIRED=1`` (``make test-dsl`` and the GPU
scripts set it), where absence fails."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests._paths import ROOT


def site() -> Path:
    return Path(os.environ.get("JITWATCH_TEST_DSL_SITE") or ROOT / ".venv-dsl" / "site")


def pythonpath(*extra: Path) -> str:
    s = site()
    parts = [str(p) for p in extra] + [str(ROOT), str(s)]
    dsl_packages = s / "nvidia_cutlass_dsl" / "dsl_packages"  # what its .pth file would add
    if dsl_packages.is_dir():
        parts.append(str(dsl_packages))
    return os.pathsep.join(parts)


def cuda_toolkit() -> Path | None:
    """NVIDIA's nvcc wheel under the DSL site (``nvidia/cu13``: nvcc, headers, cudart), if
    installed there; else ``None`` (the machine's own CUDA_HOME/PATH apply)."""
    toolkit = site() / "nvidia" / "cu13"
    return toolkit if (toolkit / "bin" / "nvcc").exists() else None


def require(module: str) -> None:
    """Skip (or fail, when required) unless ``module`` is importable with :func:`pythonpath`."""
    probe = subprocess.run(
        [sys.executable, "-c", f"import importlib.util as u, sys; sys.exit(u.find_spec({module!r}) is None)"],
        env={**os.environ, "PYTHONPATH": pythonpath()},
        capture_output=True,
        timeout=60,
    )
    if probe.returncode != 0:
        msg = f"{module} is not installed under {site()} (make dsl-env)"
        if os.environ.get("JITWATCH_TEST_DSL_REQUIRED") == "1":
            pytest.fail(msg)
        pytest.skip(msg)


def run_worker(script: Path, *args: str, env: dict[str, str], timeout: float = 300) -> tuple[dict[str, Any], str]:
    """Run ``script args`` with the DSL path; return (its last stdout line as JSON, stderr)."""
    full = {k: v for k, v in os.environ.items() if not k.startswith(("JITWATCH_", "OTEL_"))}
    full.update(PYTHONPATH=pythonpath(script.parent), OTEL_SDK_DISABLED="true", PYTHONUNBUFFERED="1", **env)
    toolkit = cuda_toolkit()
    if toolkit is not None:
        full["CUDA_HOME"] = str(toolkit)
        full["PATH"] = os.pathsep.join([str(toolkit / "bin"), str(site() / "bin"), full.get("PATH", "")])
        full["LD_LIBRARY_PATH"] = os.pathsep.join([str(toolkit / "lib"), full.get("LD_LIBRARY_PATH", "")])
    out = subprocess.run(
        [sys.executable, str(script), *args], env=full, capture_output=True, text=True, timeout=timeout
    )
    assert out.returncode == 0, f"worker failed ({out.returncode}):\n{out.stdout[-3000:]}\n{out.stderr[-6000:]}"
    return json.loads(out.stdout.strip().splitlines()[-1]), out.stderr


def jit_status(journal_dir: Path, backend: str | None = None) -> dict[str, Any]:
    """The ``/jit`` document the sidecar would serve for ``journal_dir`` (built the same way:
    :func:`jitwatch.views.status.build_status` over a read-only journal), as JSON data."""
    from jitwatch.store.journal import Journal
    from jitwatch.views.status import build_status

    journal = Journal(journal_dir, readonly=True)
    try:
        doc: dict[str, Any] = json.loads(build_status(journal, backend=backend).model_dump_json())
    finally:
        journal.close()
    return doc


def save(name: str, data: Any) -> None:
    """Write ``data`` as JSON to ``$JITWATCH_GPU_OUT/<name>.json`` when that is set (GPU scripts)."""
    out = os.environ.get("JITWATCH_GPU_OUT")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / f"{name}.json").write_text(json.dumps(data, indent=1, default=str))
