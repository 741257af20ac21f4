"""docker-compose.yml, Dockerfile and the collector config, validated offline (no Docker engine).

The compose file is validated against the Compose specification's JSON schema with
``check-jsonschema --builtin-schema vendor.compose-spec`` (schema vendored in check-jsonschema, no
network), plus this project's own rules: no ``version:``, pinned image tags (never ``:latest``),
bind-mount sources that exist and are read-only, ports published on 127.0.0.1, healthchecks, named
volumes, and one journal volume shared by the worker and the sidecar.
"""

from __future__ import annotations

import importlib.metadata
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.tools import tool_missing

yaml = pytest.importorskip("yaml")

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
COLLECTOR = ROOT / "dashboards" / "otel" / "collector.yml"

NO_HEALTHCHECK = {
    "otel-collector": "the collector image has no shell or HTTP client; probe :13133 from outside",
    "otel-data-init": "a one-shot chown of the collector's volume (service_completed_successfully)",
}


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    return data


def _check_jsonschema() -> list[str]:
    exe = Path(sys.executable).parent / "check-jsonschema"
    if exe.exists():
        return [str(exe)]
    found = shutil.which("check-jsonschema")
    if found:
        return [found]
    pytest.importorskip("check_jsonschema")
    return [sys.executable, "-m", "check_jsonschema"]


def test_compose_file_matches_the_compose_spec_schema() -> None:
    res = subprocess.run(
        [*_check_jsonschema(), "--builtin-schema", "vendor.compose-spec", str(COMPOSE)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert res.returncode == 0, res.stdout + res.stderr


def test_schema_check_rejects_a_broken_file(tmp_path: Path) -> None:
    bad = tmp_path / "docker-compose.yml"
    bad.write_text(COMPOSE.read_text().replace("    healthcheck:\n", "    healthchek:\n", 1))
    res = subprocess.run(
        [*_check_jsonschema(), "--builtin-schema", "vendor.compose-spec", str(bad)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert res.returncode != 0


def test_no_version_key_and_expected_services(compose: dict[str, Any]) -> None:
    assert "version" not in compose
    assert set(compose["services"]) == {
        "worker",
        "sidecar",
        "prometheus",
        "grafana",
        "otel-collector",
        "otel-data-init",
    }


def test_images_are_pinned(compose: dict[str, Any]) -> None:
    for name, svc in compose["services"].items():
        image = svc.get("image")
        assert image, f"{name}: no image (built services are tagged too)"
        ref = image.rsplit("/", 1)[-1]
        assert ":" in ref, f"{name}: {image} has no tag"
        tag = ref.split(":", 1)[1]
        assert tag != "latest" and re.search(r"\d", tag), f"{name}: {image} is not a pinned version"


def test_grafana_image_matches_the_sdk_line(compose: dict[str, Any]) -> None:
    tag = compose["services"]["grafana"]["image"].split(":")[1]
    try:
        sdk = importlib.metadata.version("grafana-foundation-sdk")
    except importlib.metadata.PackageNotFoundError:
        tool_missing("grafana-foundation-sdk not installed")
    grafana_line = sdk.split("!")[-1]
    assert tag.split(".")[:2] == grafana_line.split(".")[:2], (tag, sdk)


def _volumes(svc: dict[str, Any]) -> list[tuple[str, str, str]]:
    out = []
    for v in svc.get("volumes", []):
        parts = v.split(":")
        out.append((parts[0], parts[1], parts[2] if len(parts) > 2 else "rw"))
    return out


def test_bind_mounts_exist_and_are_read_only(compose: dict[str, Any]) -> None:
    binds = 0
    for name, svc in compose["services"].items():
        for source, _target, mode in _volumes(svc):
            if source.startswith((".", "/")):
                binds += 1
                assert (ROOT / source).exists(), f"{name}: bind source {source} does not exist"
                assert mode == "ro", f"{name}: config bind {source} should be read-only"
    assert binds >= 5


def test_named_volumes_declared_and_journal_shared(compose: dict[str, Any]) -> None:
    declared = set(compose["volumes"])
    used = {
        source
        for svc in compose["services"].values()
        for source, _t, _m in _volumes(svc)
        if not source.startswith((".", "/"))
    }
    assert used == declared
    journal = {n: t for n, svc in compose["services"].items() for s, t, _m in _volumes(svc) if s == "journal"}
    assert set(journal) == {"worker", "sidecar"}
    assert journal["worker"] == journal["sidecar"] == "/journal"
    for name in ("worker", "sidecar"):
        command = compose["services"][name]["command"]
        assert command[command.index("--journal-dir") + 1] == "/journal"


def test_ports_published_on_loopback_only(compose: dict[str, Any]) -> None:
    for name, svc in compose["services"].items():
        for port in svc.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), f"{name}: {port} is not bound to 127.0.0.1"


def test_healthchecks(compose: dict[str, Any]) -> None:
    for name, svc in compose["services"].items():
        if name in NO_HEALTHCHECK:
            assert "healthcheck" not in svc
            continue
        test = svc["healthcheck"]["test"]
        assert test[0] == "CMD" and len(test) > 1, f"{name}: {test}"
    assert "/-/ready" in " ".join(compose["services"]["prometheus"]["healthcheck"]["test"])
    assert "/api/health" in " ".join(compose["services"]["grafana"]["healthcheck"]["test"])
    assert "/livez" in " ".join(compose["services"]["sidecar"]["healthcheck"]["test"])
    collector = yaml.safe_load(COLLECTOR.read_text())
    assert "health_check" in collector["service"]["extensions"]
    assert any(p.endswith(":13133") for p in compose["services"]["otel-collector"]["ports"])


def test_depends_on_only_known_services(compose: dict[str, Any]) -> None:
    services = set(compose["services"])
    for name, svc in compose["services"].items():
        for dep, cond in svc.get("depends_on", {}).items():
            assert dep in services, f"{name} depends on unknown {dep}"
            if cond["condition"] == "service_healthy":
                assert "healthcheck" in compose["services"][dep]


def test_prometheus_gets_config_and_rules_side_by_side(compose: dict[str, Any]) -> None:
    mounts = {src: tgt for src, tgt, _m in _volumes(compose["services"]["prometheus"])}
    config = mounts["./dashboards/prometheus/prometheus.yml"]
    rules = mounts["./dashboards/prometheus/rules.yml"]
    assert Path(config).parent == Path(rules).parent  # rule_files: [rules.yml] is relative to the config
    assert f"--config.file={config}" in compose["services"]["prometheus"]["command"]
    prom = yaml.safe_load((ROOT / "dashboards" / "prometheus" / "prometheus.yml").read_text())
    targets = [t for job in prom["scrape_configs"] for sc in job["static_configs"] for t in sc["targets"]]
    assert targets == ["sidecar:9400"]


def test_worker_exports_spans_to_the_collector(compose: dict[str, Any]) -> None:
    env = compose["services"]["worker"]["environment"]
    assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://otel-collector:4318"
    collector = yaml.safe_load(COLLECTOR.read_text())
    assert collector["receivers"]["otlp"]["protocols"]["http"]["endpoint"].endswith(":4318")
    assert collector["service"]["pipelines"]["traces"]["receivers"] == ["otlp"]


def test_worker_events_reach_a_queryable_file_in_the_collector(compose: dict[str, Any]) -> None:
    """The logs pipeline: the worker opts in (JITWATCH_EVENTS_EXPORTER=otlp), the collector
    receives OTLP logs, bounds its memory before batching and writes rotated JSON lines into the
    otel-data volume, which a one-shot service hands to the collector's uid first."""
    assert compose["services"]["worker"]["environment"]["JITWATCH_EVENTS_EXPORTER"] == "otlp"
    collector = yaml.safe_load(COLLECTOR.read_text())
    logs = collector["service"]["pipelines"]["logs"]
    assert logs["receivers"] == ["otlp"]
    assert logs["processors"][0] == "memory_limiter" and "batch" in logs["processors"]
    for pipeline in collector["service"]["pipelines"].values():
        for name in (*pipeline["receivers"], *pipeline["processors"], *pipeline["exporters"]):
            section = "receivers" if name in pipeline["receivers"] else "processors"
            section = "exporters" if name in pipeline["exporters"] else section
            assert name in collector[section], f"{name} used but not configured"
    events = collector["exporters"]["file/events"]
    assert events["format"] == "json" and events["rotation"]["max_megabytes"] > 0
    mounts = {t: s for s, t, _m in _volumes(compose["services"]["otel-collector"])}
    volume_dir = "/var/lib/otelcol/jitwatch"
    assert mounts[volume_dir] == "otel-data" and str(Path(events["path"]).parent) == volume_dir
    init = compose["services"]["otel-data-init"]
    assert init["command"][:3] == ["chown", "-R", "10001:10001"]
    dep = compose["services"]["otel-collector"]["depends_on"]["otel-data-init"]
    assert dep["condition"] == "service_completed_successfully"


def test_service_commands_exist(compose: dict[str, Any]) -> None:
    """The worker and sidecar commands parse (``--help``: no torch import, nothing started)."""
    worker = compose["services"]["worker"]["command"]
    assert worker[:3] == ["python", "-m", "jitwatch.demo.worker"]
    res = subprocess.run(
        [sys.executable, "-m", "jitwatch.demo.worker", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert res.returncode == 0, res.stderr
    for opt in worker[3:]:
        if opt.startswith("--"):
            assert opt in res.stdout, f"demo_worker has no {opt}"
    sidecar = compose["services"]["sidecar"]["command"]
    assert sidecar[:2] == ["jitwatch", "serve"]
    res = subprocess.run(
        [sys.executable, "-m", "jitwatch.cli", "serve", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if res.returncode != 0:  # jitwatch.cli may not be runnable as a module: use the entry point
        exe = Path(sys.executable).parent / "jitwatch"
        res = subprocess.run([str(exe), "serve", "--help"], capture_output=True, text=True, timeout=60, check=False)
    assert res.returncode == 0, res.stderr
    for opt in sidecar[2:]:
        if opt.startswith("--"):
            assert opt in res.stdout, f"jitwatch serve has no {opt}"


def test_dockerfile() -> None:
    text = DOCKERFILE.read_text()
    froms = re.findall(r"^FROM\s+(\S+)", text, flags=re.M)
    assert froms and all(":" in f and not f.endswith(":latest") for f in froms)
    assert re.search(r"^USER\s+(?!root)\S+", text, flags=re.M), "the image must not run as root"
    assert "COPY jitwatch ./jitwatch" in text and "pyproject.toml" in text
    assert re.search(r'^CMD \["jitwatch", "serve"', text, flags=re.M)
    ignored = DOCKERIGNORE.read_text().split()
    for entry in (".git", ".venv*", ".tools"):
        assert entry in ignored
    assert "README.md" not in ignored  # pyproject's readme: pip install needs it
