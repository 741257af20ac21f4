"""Many sidecars, one Prometheus: the fleet configuration in dashboards/prometheus/fleet/, with real
Prometheus 2.42 binaries (Debian's, ``scripts/install-prometheus.sh``) and two real sidecars.

Each "host" is a journal written by the real journal code with its own compiles and a
``jitwatch serve`` on 127.0.0.1. The zone Prometheus runs ``fleet/scrape.yml`` (file_sd targets
rewritten to the two sidecars, intervals shortened) and sums the fleet in one query; a global
Prometheus runs ``fleet/federate.yml`` (the target rewritten to the zone Prometheus) and gets the
same sums, hosts still apart. ``promtool check config`` passes on both files.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jitwatch.core.events import Event, EventKind, Phase
from jitwatch.store.journal import Journal
from jitwatch.testing import free_port
from tests._paths import ROOT
from tests.tools import tool_missing

yaml = pytest.importorskip("yaml")

pytestmark = [pytest.mark.prometheus, pytest.mark.slow, pytest.mark.timeout(300)]

FLEET = ROOT / "dashboards" / "prometheus" / "fleet"
HOSTS = {"gpu-node-1": 3, "gpu-node-2": 2}  # serving compiles per host


def _tool(name: str) -> str:
    found = shutil.which(name)
    local = ROOT / ".tools" / "prometheus" / "usr" / "bin" / name
    path = found or (str(local) if local.is_file() else None)
    if path is None:
        tool_missing(f"{name} not installed (run scripts/install-prometheus.sh)")
    return path


def _journal(directory: Path, host: str, serving: int) -> None:
    t0 = time.time() - 60
    events = [
        Event(kind=EventKind.WORKER_START, ts=t0, host=host, pid=100, attrs={"mode": "warn"}),
        Event(kind=EventKind.WARMUP_START, ts=t0 + 1, host=host, pid=100, phase=Phase.WARMUP),
        Event(
            kind=EventKind.COMPILE, ts=t0 + 2, host=host, pid=100, phase=Phase.WARMUP, backend="triton",
            kernel="slot_mapping", key="k0", duration_s=0.2,
        ),
        Event(kind=EventKind.WARMUP_COMPLETE, ts=t0 + 3, host=host, pid=100, phase=Phase.SERVING),
    ]  # fmt: skip
    events += [
        Event(
            kind=EventKind.COMPILE, ts=t0 + 10 + i, host=host, pid=100, phase=Phase.SERVING, backend="triton",
            kernel="slot_mapping", key=f"k{i + 1}", duration_s=0.1,
        )
        for i in range(serving)
    ]  # fmt: skip
    with Journal(directory) as j:
        j.write(events)


def _http_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return json.loads(resp.read().decode())


def _wait(what: str, check: Any, deadline_s: float = 90) -> Any:
    end = time.monotonic() + deadline_s
    last: Exception | None = None
    while time.monotonic() < end:
        try:
            result = check()
            if result:
                return result
        except Exception as exc:  # noqa: BLE001 - not up yet
            last = exc
        time.sleep(0.5)
    pytest.fail(f"timed out waiting for {what} (last error: {last})")


def _query(prom: str, expr: str) -> list[dict[str, Any]]:
    body = _http_json(f"{prom}/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
    assert body["status"] == "success", body
    return body["data"]["result"]  # type: ignore[no-any-return]


def _stop(proc: subprocess.Popen[Any]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[Any]]]:
    started: list[subprocess.Popen[Any]] = []
    try:
        yield started
    finally:
        for p in reversed(started):
            _stop(p)


def test_fleet_configs_pass_promtool() -> None:
    res = subprocess.run(
        [_tool("promtool"), "check", "config", str(FLEET / "scrape.yml"), str(FLEET / "federate.yml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stdout + res.stderr


def test_two_sidecars_summed_by_one_prometheus_and_federated(
    tmp_path: Path, procs: list[subprocess.Popen[Any]]
) -> None:
    prometheus = _tool("prometheus")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "JITWATCH_"))}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    logs = tmp_path / "logs"
    logs.mkdir()

    def spawn(name: str, cmd: list[str]) -> None:
        out = open(logs / f"{name}.log", "w")  # closed with the process's end
        procs.append(subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, text=True))

    targets = []
    for host, serving in HOSTS.items():
        journal = tmp_path / host / "journal"
        _journal(journal, host, serving)
        port = free_port()
        spawn(host, [sys.executable, "-m", "jitwatch", "serve", "--host", "127.0.0.1", "--port", str(port),
                     "--journal-dir", str(journal)])  # fmt: skip
        targets.append({"targets": [f"127.0.0.1:{port}"], "labels": {"host": host}})
        _wait(f"{host}'s sidecar", lambda port=port: _http_json(f"http://127.0.0.1:{port}/livez"))

    # the zone Prometheus: the repo's fleet/scrape.yml, targets and intervals for the test
    zone_dir = tmp_path / "zone"
    zone_dir.mkdir()
    (zone_dir / "sidecars.json").write_text(json.dumps(targets))
    zone_cfg = yaml.safe_load((FLEET / "scrape.yml").read_text())
    zone_cfg["global"].update(scrape_interval="1s", evaluation_interval="1s", scrape_timeout="1s")
    zone_cfg["rule_files"] = [str(ROOT / "dashboards" / "prometheus" / "rules.yml")]
    (job,) = zone_cfg["scrape_configs"]
    job["file_sd_configs"][0]["files"] = [str(zone_dir / "sidecars.json")]
    job["file_sd_configs"][0]["refresh_interval"] = "1s"
    (zone_dir / "prometheus.yml").write_text(yaml.safe_dump(zone_cfg))
    zone_port = free_port()
    spawn("zone", [prometheus, f"--config.file={zone_dir / 'prometheus.yml'}",
                   f"--storage.tsdb.path={zone_dir / 'tsdb'}", f"--web.listen-address=127.0.0.1:{zone_port}",
                   "--log.level=warn"])  # fmt: skip
    zone = f"http://127.0.0.1:{zone_port}"

    fleet_sum = 'sum(jitwatch_compiles_total{phase="serving"})'
    total = sum(HOSTS.values())
    got = _wait(
        "the zone Prometheus to scrape both sidecars",
        lambda: (r := _query(zone, fleet_sum)) and float(r[0]["value"][1]) == total and r,
    )
    assert float(got[0]["value"][1]) == total  # one query sums the fleet
    per_host = {r["metric"]["host"]: float(r["value"][1]) for r in _query(zone, f"sum by (host) ({fleet_sum[4:-1]})")}
    assert per_host == {h: float(n) for h, n in HOSTS.items()}

    # the global Prometheus federates the zone's jitwatch series (repo's fleet/federate.yml)
    glob_dir = tmp_path / "global"
    glob_dir.mkdir()
    glob_cfg = yaml.safe_load((FLEET / "federate.yml").read_text())
    glob_cfg["global"].update(scrape_interval="1s", evaluation_interval="1s", scrape_timeout="1s")
    glob_cfg["scrape_configs"][0]["static_configs"] = [{"targets": [f"127.0.0.1:{zone_port}"]}]
    (glob_dir / "prometheus.yml").write_text(yaml.safe_dump(glob_cfg))
    glob_port = free_port()
    spawn("global", [prometheus, f"--config.file={glob_dir / 'prometheus.yml'}",
                     f"--storage.tsdb.path={glob_dir / 'tsdb'}", f"--web.listen-address=127.0.0.1:{glob_port}",
                     "--log.level=warn"])  # fmt: skip
    glob = f"http://127.0.0.1:{glob_port}"
    got = _wait(
        "the global Prometheus to federate the fleet",
        lambda: (r := _query(glob, fleet_sum)) and float(r[0]["value"][1]) == total and r,
    )
    federated = _query(glob, 'count by (zone, job) (jitwatch_compiles_total{phase="serving"})')
    assert [(r["metric"].get("zone"), r["metric"].get("job")) for r in federated] == [("zone-a", "jitwatch")]
    hosts = {r["metric"]["host"] for r in _query(glob, 'jitwatch_compiles_total{phase="serving"}')}
    assert hosts == set(HOSTS)


def test_remote_write_to_a_global_prometheus(tmp_path: Path, procs: list[subprocess.Popen[Any]]) -> None:
    """The push alternative scrape.yml documents: the zone Prometheus remote-writes jitwatch_*
    series (write_relabel_configs keep) to a global Prometheus 2.42 started with
    --web.enable-remote-write-receiver; one query there sums the fleet."""
    prometheus = _tool("prometheus")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "JITWATCH_"))}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")

    def spawn(name: str, cmd: list[str]) -> None:
        out = open(tmp_path / f"{name}.log", "w")  # closed with the process's end
        procs.append(subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, text=True))

    glob_dir = tmp_path / "global"
    glob_dir.mkdir()
    (glob_dir / "prometheus.yml").write_text(yaml.safe_dump({"global": {"scrape_interval": "1s"}}))
    glob_port = free_port()
    spawn("global", [prometheus, f"--config.file={glob_dir / 'prometheus.yml'}",
                     f"--storage.tsdb.path={glob_dir / 'tsdb'}", f"--web.listen-address=127.0.0.1:{glob_port}",
                     "--web.enable-remote-write-receiver", "--log.level=warn"])  # fmt: skip
    glob = f"http://127.0.0.1:{glob_port}"
    _wait("the global Prometheus", lambda: urllib.request.urlopen(glob + "/-/ready", timeout=2).status == 200)

    targets = []
    for host, serving in HOSTS.items():
        journal = tmp_path / host / "journal"
        _journal(journal, host, serving)
        port = free_port()
        spawn(host, [sys.executable, "-m", "jitwatch", "serve", "--host", "127.0.0.1", "--port", str(port),
                     "--journal-dir", str(journal)])  # fmt: skip
        targets.append({"targets": [f"127.0.0.1:{port}"], "labels": {"host": host}})
        _wait(f"{host}'s sidecar", lambda port=port: _http_json(f"http://127.0.0.1:{port}/livez"))
    zone_dir = tmp_path / "zone"
    zone_dir.mkdir()
    (zone_dir / "sidecars.json").write_text(json.dumps(targets))
    zone_cfg = yaml.safe_load((FLEET / "scrape.yml").read_text())
    zone_cfg["global"].update(scrape_interval="1s", evaluation_interval="1s", scrape_timeout="1s")
    zone_cfg.pop("rule_files")
    zone_cfg["scrape_configs"][0]["file_sd_configs"] = [
        {"files": [str(zone_dir / "sidecars.json")], "refresh_interval": "1s"}
    ]
    zone_cfg["remote_write"] = [  # the block scrape.yml documents, pointed at the test's global
        {
            "url": f"{glob}/api/v1/write",
            "write_relabel_configs": [{"source_labels": ["__name__"], "regex": "jitwatch_.*", "action": "keep"}],
        }
    ]
    (zone_dir / "prometheus.yml").write_text(yaml.safe_dump(zone_cfg))
    spawn("zone", [prometheus, f"--config.file={zone_dir / 'prometheus.yml'}",
                   f"--storage.tsdb.path={zone_dir / 'tsdb'}", f"--web.listen-address=127.0.0.1:{free_port()}",
                   "--log.level=warn"])  # fmt: skip
    fleet_sum = 'sum(jitwatch_compiles_total{phase="serving"})'
    total = sum(HOSTS.values())
    _wait(
        "remote-written series summing the fleet on the global Prometheus",
        lambda: (r := _query(glob, fleet_sum)) and float(r[0]["value"][1]) == total,
    )
    assert {r["metric"]["host"] for r in _query(glob, 'jitwatch_compiles_total{phase="serving"}')} == set(HOSTS)
    assert _query(glob, "up") == []  # only jitwatch_* series were kept by the relabel rule
