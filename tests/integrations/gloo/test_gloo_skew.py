"""Collective danger with real collectives on CPU: a ``torch.distributed`` gloo group of three worker
processes doing all-reduces; rank 1 compiles a Triton kernel during serving (a real compile-only
compile, held open by a chained ``knobs.runtime.jit_cache_hook`` until the test releases it) while
ranks 0 and 2 wait in the all-reduce. Real sidecar (``jitwatch serve`` on 127.0.0.1) and a real
Prometheus (2.42, the repository's ``rules.yml``, scrape and evaluation every second).

While the compile runs the test sees, through the sidecar, rank 1's in-flight compile and its
growing age (ranks 0 and 2: none in flight), and through Prometheus's API the
``JitwatchInflightCompileSkew`` alert firing for rank 1 — before the compile ends. Then it releases
the compile and checks the other ranks really waited in the all-reduce that long, and that the
compile's reason and the stalled request are in the journal.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from jitwatch.testing import free_port
from tests.observability.test_prometheus_e2e import RULES, _jitwatch_cmd, _stop, find_tool, http_json, wait_for
from tests.tools import tool_missing

yaml = pytest.importorskip("yaml")
torch_dist = pytest.importorskip("torch.distributed")

pytestmark = [pytest.mark.prometheus, pytest.mark.slow, pytest.mark.timeout(420)]

ROOT = Path(__file__).resolve().parents[3]
PROM_CONFIG = ROOT / "dashboards" / "prometheus" / "prometheus.yml"
WORKER = Path(__file__).with_name("skew_worker.py")
WORLD = 3
COMPILER = 1
KERNEL = "allreduce_prep_kernel"


@dataclass
class Group:
    prom_url: str
    sidecar_url: str
    journal: Path
    release: Path
    workers: list[subprocess.Popen[str]]
    logs: Path


@pytest.fixture
def group(tmp_path: Path) -> Iterator[Group]:
    prometheus = find_tool("prometheus")
    if prometheus is None or not torch_dist.is_gloo_available():
        tool_missing("needs prometheus (scripts/install-prometheus.sh) and torch.distributed with gloo")
    journal, logs = tmp_path / "journal", tmp_path / "logs"
    logs.mkdir()
    sidecar_port, prom_port, init_port = free_port(), free_port(), free_port()
    instance = f"127.0.0.1:{sidecar_port}"
    config = yaml.safe_load(PROM_CONFIG.read_text())
    config["global"].update({"scrape_interval": "1s", "evaluation_interval": "1s", "scrape_timeout": "1s"})
    config["rule_files"] = [str(RULES)]
    (job,) = config["scrape_configs"]
    job["static_configs"] = [{"targets": [instance]}]
    cfg = tmp_path / "prometheus.yml"
    cfg.write_text(yaml.safe_dump(config))

    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "JITWATCH_", "TRACEPARENT"))}
    env.update(OTEL_SDK_DISABLED="true", TRITON_CACHE_DIR=str(tmp_path / "triton-cache"), GLOO_SOCKET_IFNAME="lo")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    procs: list[subprocess.Popen[Any]] = []
    files = []

    def spawn(name: str, cmd: list[str], **kw: Any) -> subprocess.Popen[Any]:
        out = open(logs / f"{name}.log", "w")
        files.append(out)
        proc = subprocess.Popen(cmd, stdout=kw.pop("stdout", out), stderr=out, env=env, text=True, **kw)
        procs.append(proc)
        return proc

    try:
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
                "--log.level=warn",
            ],
        )
        prom_url = f"http://127.0.0.1:{prom_port}"
        wait_for(
            "Prometheus /-/ready", lambda: urllib.request.urlopen(prom_url + "/-/ready", timeout=2).status == 200, 60
        )
        release = tmp_path / "release"
        workers = [
            spawn(
                f"rank{r}",
                [sys.executable, str(WORKER), str(r), str(WORLD), str(init_port), str(journal), str(release)],
                stdout=subprocess.PIPE,
            )
            for r in range(WORLD)
        ]
        yield Group(prom_url, sidecar_url, journal, release, workers, logs)
    finally:
        (tmp_path / "release").touch()
        for proc in reversed(procs):
            _stop(proc)
        for f in files:
            f.close()


def _alerts(prom: str) -> list[dict[str, Any]]:
    return list(http_json(prom + "/api/v1/alerts")["data"]["alerts"])


def test_one_rank_compiling_while_peers_wait_in_allreduce(group: Group) -> None:
    def ranks() -> dict[int, dict[str, Any]]:
        return {r["rank"]: r for r in http_json(group.sidecar_url + "/jit")["ranks"]}

    def compiling() -> dict[int, dict[str, Any]] | None:
        got = ranks()
        if len(got) != WORLD or not all(r["state"] == "serving" for r in got.values()):
            return None
        mine = got[COMPILER]["inflight"]
        return got if mine and mine[0]["age_s"] >= 3 else None

    seen = wait_for("rank 1's in-flight compile in /jit", compiling, 240)
    (inflight,) = seen[COMPILER]["inflight"]
    assert (inflight["backend"], inflight["kernel"], inflight["phase"]) == ("triton", KERNEL, "serving")
    assert [seen[r]["inflight"] for r in (0, 2)] == [[], []]  # the peers compile nothing: they wait
    print(
        "JIT_RANKS",
        json.dumps({r: {k: v[k] for k in ("state", "oldest_inflight_age_s", "inflight")} for r, v in seen.items()}),
    )

    def firing() -> list[dict[str, Any]]:
        return [
            a
            for a in _alerts(group.prom_url)
            if a["labels"]["alertname"] == "JitwatchInflightCompileSkew" and a["state"] == "firing"
        ]

    (alert,) = wait_for("JitwatchInflightCompileSkew firing in Prometheus", firing, 120)
    assert alert["labels"]["rank"] == str(COMPILER)
    print("ALERT", json.dumps(alert))
    # still in flight: the alert fired while the compile was running, not after
    assert ranks()[COMPILER]["inflight"], "the compile ended before the alert fired"
    age = http_json(
        group.prom_url + "/api/v1/query?query=" + urllib.request.quote("jitwatch_inflight_compile_age_seconds")
    )["data"]["result"]
    by_rank = {s["metric"]["rank"]: float(s["value"][1]) for s in age}
    assert by_rank["0"] == by_rank["2"] == 0 and by_rank["1"] >= 5
    held_s = time.monotonic()

    group.release.touch()  # let the compile finish
    outs: dict[int, str] = {}
    for r, proc in enumerate(group.workers):
        out, _ = proc.communicate(timeout=180)
        assert proc.returncode == 0, (group.logs / f"rank{r}.log").read_text()[-3000:]
        outs[r] = out
    held_s = time.monotonic() - held_s
    waits = {
        r: {int(p[1]): float(p[3]) for p in (ln.split() for ln in out.splitlines()) if p and p[0] == "step"}
        for r, out in outs.items()
    }
    print("ALLREDUCE_WAITS", json.dumps(waits))
    for peer in (0, 2):
        assert waits[peer][2] >= 5.0, waits  # they waited in the collective for rank 1's compile
    assert waits[COMPILER][2] < 5.0

    def ended() -> dict[int, dict[str, Any]] | None:
        got = ranks()
        return got if not got[COMPILER]["inflight"] else None

    wait_for("the compile to leave /jit's in-flight list", ended, 30)
    jit = http_json(group.sidecar_url + "/jit")
    (serving,) = [c for c in jit["recent_serving_compiles"] if c["kernel"] == KERNEL]
    assert serving["rank"] == COMPILER and serving["reason"] == "n: i32 %16 → other"
    assert serving["duration_s"] >= 5.0
    worst = jit["worst_requests"][0]
    assert (worst["rank"], worst["request"]) == (COMPILER, "step-2") and worst["compile_s"] >= 5.0
    print("WORST_REQUEST", json.dumps(worst))
