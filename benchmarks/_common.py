"""Shared helpers for the jitwatch benchmarks: statistics, machine description, result files.

Every benchmark script writes one JSON file (``--out``) holding its figures *and* the baseline
measured in the same run, plus :func:`machine_info` (CPU, GPU, versions, date). Nothing here
asserts on a timing: the numbers are reported, and ``docs/benchmarks.md`` quotes them.
"""

from __future__ import annotations

import atexit
import datetime as _dt
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # run as `python benchmarks/x.py` without installing jitwatch
    sys.path.insert(0, str(REPO))

os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # silence Triton 3.9's FutureWarning
os.environ.setdefault("OTEL_SDK_DISABLED", "true")  # the warmup span is not what is measured


def scratch_dir(prefix: str = "jw-bench-") -> Path:
    """A new private directory (``tempfile.mkdtemp``, mode 0700) for one benchmark's journals and
    caches, removed with everything in it when the process exits (``atexit``), also after an
    exception. ``JITWATCH_BENCH_KEEP=1`` keeps it and prints its path to stderr. Benchmarks write
    journals of up to hundreds of MB; left behind, they filled this project's CI disk once."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    if os.environ.get("JITWATCH_BENCH_KEEP") == "1":
        print(f"kept: {path}", file=sys.stderr)
    else:
        atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile, ``q`` in [0, 100]. ``values`` must be non-empty."""
    xs = sorted(values)
    if len(xs) == 1:
        return float(xs[0])
    pos = (len(xs) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return float(xs[lo] + (xs[hi] - xs[lo]) * (pos - lo))


def summary(values: Sequence[float], scale: float = 1.0) -> dict[str, float]:
    """median/p10/p90/p99/min/max/mean/stdev of ``values`` x ``scale`` (e.g. 1e6 for µs)."""
    xs = [v * scale for v in values]
    if not xs:
        return {"n": 0}
    return {
        "n": len(xs),
        "median": statistics.median(xs),
        "p10": percentile(xs, 10),
        "p90": percentile(xs, 90),
        "p99": percentile(xs, 99),
        "min": min(xs),
        "max": max(xs),
        "mean": statistics.fmean(xs),
        "stdev": statistics.pstdev(xs) if len(xs) > 1 else 0.0,
    }


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _version(mod: str) -> str | None:
    try:
        m = __import__(mod)
        return str(getattr(m, "__version__", "?"))
    except Exception:  # noqa: BLE001
        return None


def machine_info() -> dict[str, Any]:
    """What ran the benchmark: CPU, cores, memory, GPU (if torch sees one), versions, UTC date.

    No host name, user name or path is recorded.
    """
    info: dict[str, Any] = {
        "date_utc": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S"),
        "cpu": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "platform": f"{platform.system()} {platform.machine()}",
        "triton": _version("triton"),
        "torch": _version("torch"),
        "jitwatch": _version("jitwatch"),
        "prometheus_client": None,
        "sqlite": None,
    }
    try:
        info["loadavg_1_5_15"] = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        pass
    try:
        import sqlite3

        info["sqlite"] = sqlite3.sqlite_version
    except Exception:  # noqa: BLE001
        pass
    try:
        from importlib.metadata import version

        info["prometheus_client"] = version("prometheus-client")
    except Exception:  # noqa: BLE001
        pass
    try:
        mem_kb = next(
            int(line.split()[1])
            for line in Path("/proc/meminfo").read_text().splitlines()
            if line.startswith("MemTotal")
        )
        info["mem_gib"] = round(mem_kb / 2**20, 1)
    except Exception:  # noqa: BLE001
        pass
    try:
        import torch

        if torch.cuda.is_available():
            info["gpu"] = torch.cuda.get_device_name(0)
            info["cuda"] = torch.version.cuda
            info["gpu_count"] = torch.cuda.device_count()
    except Exception:  # noqa: BLE001
        pass
    return info


def write_result(path: str | os.PathLike[str] | None, name: str, payload: dict[str, Any]) -> dict[str, Any]:
    """Write ``{"benchmark": name, "machine": …, **payload}`` as JSON to ``path`` (if given)."""
    doc = {"benchmark": name, "machine": machine_info(), **payload}
    if path:
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(json.dumps(doc, indent=2, default=str))
    return doc


def rss_bytes(pid: int | None = None) -> int:
    """Resident set size of ``pid`` (default: this process), bytes, from ``/proc/<pid>/status``."""
    status = Path(f"/proc/{pid or 'self'}/status").read_text()
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc status")


def fmt_us(x: float) -> str:
    return f"{x:.1f} µs" if x < 1000 else f"{x / 1000:.2f} ms"
