"""End to end through a real Prometheus: worker → journal → sidecar → Prometheus → rules/panels.

Marker ``prometheus`` (needs the ``prometheus`` binary; ``scripts/install-prometheus.sh`` puts
Debian's 2.42 under ``.tools/prometheus``). Everything real and on 127.0.0.1:

1. the sidecar, ``jitwatch serve --host 127.0.0.1 --port P --journal-dir D`` (a subprocess);
2. Prometheus with a test copy of ``dashboards/prometheus/prometheus.yml`` (scrape and evaluation
   every 1 s, target rewritten to the sidecar) and the repository's ``rules.yml`` unchanged;
3. a worker process using jitwatch with Triton's compile-only driver: warmup compiles
   ``add_one_kernel`` and runs one ``@triton.autotune`` miss (Triton's Autotuner and
   ``knobs.autotuning.listener``; the benchmark function is replaced because nothing can launch
   without a GPU), then, in serving, two requests each compile a new specialization of
   ``add_one_kernel`` (a few seconds apart, so rates have two points).

It asserts through Prometheus's HTTP API that ``JitwatchPostWarmupCompile`` fires with
``backend="triton"`` and ``kernel="add_one_kernel"``, that ``jitwatch_backend_info`` reports Triton
active, and that every dashboard panel query (and template variable) returns data, with the
template variables substituted the way Grafana would (the backend variable both as *All* and as its
listed values). The one exception is the CUDA-graph panel: nothing in a Triton-only worker records
CUDA graphs (:data:`EMPTY_OK`). Bounded in time; every process is stopped in ``finally``.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from jitwatch.testing import free_port
from tests.tools import tool_missing, tool_module

yaml = pytest.importorskip("yaml")
tool_module("grafana_foundation_sdk", "grafana-foundation-sdk not installed (make env)")

pytestmark = [pytest.mark.prometheus, pytest.mark.slow, pytest.mark.timeout(420)]

ROOT = Path(__file__).resolve().parents[2]
PROM_CONFIG = ROOT / "dashboards" / "prometheus" / "prometheus.yml"
RULES = ROOT / "dashboards" / "prometheus" / "rules.yml"
DASHBOARD = ROOT / "dashboards" / "grafana" / "jitwatch.json"
GENERATOR = ROOT / "dashboards" / "grafana" / "generate.py"

KERNEL = "add_one_kernel"
BACKEND = "triton"
EMPTY_OK = {
    "Graph captures (CUDA graphs) by backend/kernel": "CUDA graphs are recorded by torch.compile "
    "(mode=reduce-overhead), not by the Triton-only worker here",
    "Recompiles by reason class": "reason classes come from torch.compile's guard failures "
    "(jitwatch_recompiles_total); the Triton-only worker here has none",
}
"""Panels allowed to return no data in this test (their queries must still succeed), and why."""
DEADLINE_S = 180.0
"""Upper bound for each wait below (worker start + cold compiles + alert evaluation)."""

WORKER = r'''
"""jitwatch e2e worker: real compile-only Triton compiles in warmup and in serving."""
import os, sys, time, warnings
warnings.filterwarnings("ignore")
import torch
import triton
import triton.language as tl

import jitwatch
from jitwatch.backends.triton.compile_only import CompileOnlyLaunchError, activate


@triton.jit
def add_one_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=mask) + 1, mask=mask)


def _bench(kernel_call, quantiles):
    # No GPU: Triton's benchmarker cannot launch. Report a fixed timing per call instead; the
    # Autotuner, its cache and knobs.autotuning.listener are Triton's own.
    _bench.calls += 1
    return [float(_bench.calls)] * 3
_bench.calls = 0


@triton.autotune(
    configs=[triton.Config({"BLOCK": 32}, num_warps=1), triton.Config({"BLOCK": 64}, num_warps=2)],
    key=["n"],
    do_bench=_bench,
)
@triton.jit
def scale_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2, mask=mask)


def say(msg):
    sys.stdout.write(msg + "\n")
    sys.stdout.flush()


activate(90)
mon = jitwatch.install(mode="warn", rank=0, journal_dir=sys.argv[1])
x = torch.zeros(256, dtype=torch.float32)
with mon.warmup():
    add_one_kernel.warmup(x, 64, BLOCK=64, grid=(1,))          # n % 16 == 0
    try:
        scale_kernel[(1,)](x, 64)                              # autotune miss, then compile
    except CompileOnlyLaunchError:
        pass                                                   # compiled; the launch is refused
mon.flush()
say("warm")
time.sleep(float(sys.argv[2]))
with mon.request(name="first"):
    add_one_kernel.warmup(x, 7, BLOCK=64, grid=(1,))           # new class: n not multiple of 16
mon.flush()
say("serving-compile-1")
time.sleep(float(sys.argv[2]))
with mon.request(name="second"):
    add_one_kernel.warmup(x, 1, BLOCK=64, grid=(1,))           # new class: n == 1
mon.flush()
say("serving-compile-2")
sys.stdin.read()  # stay up (the sidecar serves the journal either way) until the test closes stdin
jitwatch.uninstall()
'''


def find_tool(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    local = ROOT / ".tools" / "prometheus" / "usr" / "bin" / name
    return str(local) if local.is_file() else None


def http_json(url: str, timeout: float = 5.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return json.loads(resp.read().decode())


def wait_for(what: str, check: Any, deadline_s: float = DEADLINE_S, interval: float = 0.5) -> Any:
    """Poll ``check()`` until it returns something truthy; fail after ``deadline_s``."""
    end = time.monotonic() + deadline_s
    last_exc: Exception | None = None
    while time.monotonic() < end:
        try:
            result = check()
            if result:
                return result
        except Exception as exc:  # noqa: BLE001 - not up yet
            last_exc = exc
        time.sleep(interval)
    pytest.fail(f"timed out after {deadline_s:.0f} s waiting for {what} (last error: {last_exc})")


@dataclass
class Stack:
    prom_url: str
    sidecar_url: str
    instance: str
    worker: subprocess.Popen[str]
    logs: Path


def _stop(proc: subprocess.Popen[Any] | None) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


def _jitwatch_cmd() -> list[str]:
    exe = Path(sys.executable).parent / "jitwatch"
    return [str(exe)] if exe.exists() else [sys.executable, "-c", "from jitwatch.cli import app; app()"]


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    prometheus = find_tool("prometheus")
    if prometheus is None:
        tool_missing("prometheus not installed (run scripts/install-prometheus.sh)")
    journal = tmp_path / "journal"
    logs = tmp_path / "logs"
    logs.mkdir()
    sidecar_port, prom_port = free_port(), free_port()
    instance = f"127.0.0.1:{sidecar_port}"

    # The repo's scrape config with test intervals and the sidecar's address; the repo's rules.
    config = yaml.safe_load(PROM_CONFIG.read_text())
    config["global"].update({"scrape_interval": "1s", "evaluation_interval": "1s", "scrape_timeout": "1s"})
    config["rule_files"] = [str(RULES)]
    (job,) = config["scrape_configs"]
    job["static_configs"] = [{"targets": [instance]}]
    cfg = tmp_path / "prometheus.yml"
    cfg.write_text(yaml.safe_dump(config))

    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "JITWATCH_", "TRACEPARENT"))}
    env["OTEL_SDK_DISABLED"] = "true"
    procs: list[subprocess.Popen[Any]] = []
    files = []
    try:

        def spawn(name: str, cmd: list[str], **kw: Any) -> subprocess.Popen[Any]:
            out = open(logs / f"{name}.log", "w")
            files.append(out)
            proc = subprocess.Popen(cmd, stdout=kw.pop("stdout", out), stderr=out, env=env, text=True, **kw)
            procs.append(proc)
            return proc

        spawn(
            "sidecar",
            [
                *_jitwatch_cmd(),
                "serve",
                "--host",
                "127.0.0.1",
                "--port",
                str(sidecar_port),
                "--journal-dir",
                str(journal),
            ],
        )
        sidecar_url = f"http://{instance}"
        wait_for("the sidecar's /livez", lambda: http_json(sidecar_url + "/livez"), 60)

        spawn(
            "prometheus",
            [
                prometheus,
                f"--config.file={cfg}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{prom_port}",
                "--storage.tsdb.retention.time=1h",
                "--log.level=warn",
            ],
        )
        prom_url = f"http://127.0.0.1:{prom_port}"
        wait_for(
            "Prometheus /-/ready",
            lambda: urllib.request.urlopen(prom_url + "/-/ready", timeout=2).status == 200,
            60,
        )

        script = tmp_path / "e2e_worker.py"
        script.write_text(WORKER)
        cache = tmp_path / "triton-cache"
        cache.mkdir()
        env["TRITON_CACHE_DIR"] = str(cache)
        worker = spawn(
            "worker",
            [sys.executable, str(script), str(journal), "4"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        yield Stack(prom_url=prom_url, sidecar_url=sidecar_url, instance=instance, worker=worker, logs=logs)
    finally:
        for proc in reversed(procs):
            if proc.stdin is not None:
                try:
                    proc.stdin.close()
                except OSError:
                    pass
            _stop(proc)
        for f in files:
            f.close()


def _read_until(stack: Stack, marker: str) -> None:
    assert stack.worker.stdout is not None
    end = time.monotonic() + DEADLINE_S
    while time.monotonic() < end:
        line = stack.worker.stdout.readline()
        if not line:
            err = (stack.logs / "worker.log").read_text()
            pytest.fail(f"worker exited (rc={stack.worker.poll()}) before {marker!r}:\n{err[-3000:]}")
        if line.strip() == marker:
            return
    pytest.fail(f"worker never printed {marker!r}")


def _query(prom: str, expr: str, *, instant: bool) -> list[dict[str, Any]]:
    if instant:
        params = {"query": expr}
        path = "/api/v1/query"
    else:
        now = time.time()
        params = {"query": expr, "start": f"{now - 180:.3f}", "end": f"{now:.3f}", "step": "1"}
        path = "/api/v1/query_range"
    body = http_json(prom + path + "?" + urllib.parse.urlencode(params))
    assert body["status"] == "success", body
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


def _finite_values(result: list[dict[str, Any]]) -> list[float]:
    values = []
    for series in result:
        points = series.get("values") or [series["value"]]
        values += [float(v) for _, v in points if not math.isnan(float(v))]
    return values


def _grafana_regex(values: list[str]) -> str:
    """A multi-value variable in a ``=~`` matcher, as Grafana formats it: ``(v1|v2)``, regex-escaped,
    then escaped for a PromQL string literal."""
    escaped = [re.sub(r"([\\.^$*+?()\[\]{}|])", r"\\\1", v) for v in values]
    return "(" + "|".join(escaped).replace("\\", "\\\\") + ")"


def _load_generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("jitwatch_dashboard_generate_e2e", GENERATOR)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_post_warmup_compile_alert_and_every_panel_query(stack: Stack) -> None:
    t0 = time.monotonic()
    wall0 = time.time()
    _read_until(stack, "warm")
    _read_until(stack, "serving-compile-1")

    # (1) The alert fires, from a real compile, with the kernel's label.
    def firing() -> list[dict[str, Any]]:
        alerts = http_json(stack.prom_url + "/api/v1/alerts")["data"]["alerts"]
        return [
            a for a in alerts if a["labels"].get("alertname") == "JitwatchPostWarmupCompile" and a["state"] == "firing"
        ]

    (alert,) = wait_for("JitwatchPostWarmupCompile to fire", firing)
    t_alert = time.monotonic() - t0
    assert alert["labels"]["backend"] == BACKEND
    assert alert["labels"]["kernel"] == KERNEL
    assert alert["labels"]["rank"] == "0"
    assert alert["labels"]["severity"] == "warning"
    assert alert["labels"]["instance"] == stack.instance
    assert alert["annotations"]["runbook_url"] == "docs/runbook.md#jitwatchpostwarmupcompile"
    assert alert["annotations"]["summary"] == f"{BACKEND} compiled {KERNEL} during serving on rank 0"
    assert f"backend={BACKEND}" in alert["annotations"]["description"]
    # Warmup compiles never alert: nothing fired for the autotuned kernel compiled in warmup.
    assert all(a["labels"].get("kernel") == KERNEL for a in firing())

    # Let the second serving compile land and be scraped, so windowed panels have a change in range.
    _read_until(stack, "serving-compile-2")

    def serving_compiles_two() -> bool:
        res = _query(
            stack.prom_url,
            f'sum(jitwatch_serving_compiles_total{{backend="{BACKEND}",kernel="{KERNEL}"}})',
            instant=True,
        )
        return bool(res) and float(res[0]["value"][1]) == 2.0

    wait_for("the second serving compile in Prometheus", serving_compiles_two, 60)
    time.sleep(3)  # a few more scrapes after the change

    # The worker's backends, as the "Backends per rank" table shows them.
    info = _query(stack.prom_url, "jitwatch_backend_info", instant=True)
    backends = {s["metric"]["backend"]: s["metric"] for s in info}
    assert backends[BACKEND]["state"] == "active" and backends[BACKEND]["version"], info
    assert backends[BACKEND]["rank"] == "0"

    # (2) Every template variable resolves and every panel query returns finite data.
    gen = _load_generator()
    dash = json.loads(DASHBOARD.read_text())
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    labels = {
        "instance": http_json(
            stack.prom_url
            + "/api/v1/label/instance/values?"
            + urllib.parse.urlencode({"match[]": "jitwatch_journal_up"})
        )["data"],
        "rank": http_json(
            stack.prom_url
            + "/api/v1/label/rank/values?"
            + urllib.parse.urlencode({"match[]": f'jitwatch_warmup_complete{{instance=~"{stack.instance}"}}'})
        )["data"],
        "backend": http_json(
            stack.prom_url
            + "/api/v1/label/backend/values?"
            + urllib.parse.urlencode({"match[]": "jitwatch_backend_info"})
        )["data"],
    }
    assert variables["backend"]["query"] == "label_values(jitwatch_backend_info, backend)"
    assert labels["instance"] == [stack.instance] and labels["rank"] == ["0"]
    assert BACKEND in labels["backend"], labels
    common = {
        "$instance": _grafana_regex(labels["instance"]),
        "$rank": _grafana_regex(labels["rank"]),
        "$__rate_interval": "1m",
        "$__range": "10m",
    }
    # Backend "All" (the variable's allValue, as Grafana sends it) and the listed values selected.
    substitutions = [
        {**common, "$backend": variables["backend"]["allValue"]},
        {**common, "$backend": _grafana_regex(labels["backend"])},
    ]

    report: list[str] = []
    empty: list[str] = []
    targets = []
    stack_ = list(dash["panels"])
    while stack_:
        panel = stack_.pop(0)
        stack_.extend(panel.get("panels", []))
        targets += [(panel["title"], t) for t in panel.get("targets", [])]
    assert len(targets) == len(gen.panel_queries(dash)) >= 18
    for subst in substitutions:
        for title, target in targets:
            expr = target["expr"]
            for var, value in subst.items():
                expr = expr.replace(var, value)
            assert "$" not in expr, f"unsubstituted variable in {expr}"
            instant = bool(target.get("instant"))
            result = _query(stack.prom_url, expr, instant=instant)
            finite = _finite_values(result)
            report.append(
                f"{title} [{target['refId']}] {'instant' if instant else 'range'} (backend {subst['$backend']}): "
                f"{len(result)} series, {len(finite)} finite points"
            )
            if not finite and title not in EMPTY_OK:
                empty.append(f"{title} [{target['refId']}]: {expr}")
    print("\n".join(report))
    print(f"alert fired {t_alert:.1f} s after the worker started")
    assert not empty, "panel queries without data:\n" + "\n".join(empty)

    # The serving table's "last serving compile" column (no per-kernel timestamp family: derived from
    # the serving counter) is the minute of this run's latest serving compile of the kernel.
    (last_col,) = [t for title, t in targets if title == "Serving-phase compiles by kernel" and t["refId"] == "B"]
    expr = last_col["expr"]
    for var, value in substitutions[0].items():
        expr = expr.replace(var, value)
    (row,) = _query(stack.prom_url, expr, instant=True)
    assert (row["metric"]["backend"], row["metric"]["kernel"]) == (BACKEND, KERNEL)
    assert wall0 - 60 <= float(row["value"][1]) / 1000 <= time.time() + 1, (row, wall0)

    # Nothing else fires: no hook errors, no dropped events, no skew with one rank, warmup done.
    alerts = http_json(stack.prom_url + "/api/v1/alerts")["data"]["alerts"]
    assert {a["labels"]["alertname"] for a in alerts if a["state"] == "firing"} == {"JitwatchPostWarmupCompile"}

    # The sidecar's /jit has the key that the alert points to.
    status = http_json(stack.sidecar_url + "/jit")
    (kernel,) = [k for k in status["kernels"] if k["name"] == KERNEL and k["backend"] == BACKEND]
    assert kernel["compiles_serving"] == 2 and kernel["last_key"]
