"""Backends are found by name: built-ins, and third-party ones through the ``jitwatch.backends``
entry-point group — here a real out-of-tree backend, discovered through ``importlib.metadata``,
whose compiles reach ``/jit`` and ``/metrics`` with its own backend name."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families as parse_text

from jitwatch.backends import BUILTIN, ENTRY_POINT_GROUP, create, registry
from jitwatch.errors import BackendError
from jitwatch.testing import free_port

TOY = Path(__file__).resolve().parent / "toy_backend"

WORKER = textwrap.dedent(
    """
    import json, sys
    import jitwatch
    mon = jitwatch.install(tracer_provider=False)
    before = {n: s.state for n, s in mon.backend_statuses.items()}
    import toyjit  # the host imports its library: the backend hooks in
    with mon.warmup():
        toyjit.compile("rope", (8, 64))
    with mon.request("req-1"):
        toyjit.compile("rope", (8, 64))  # in-memory hit: no compile
        toyjit.compile("rope", (16, 64))  # serving compile
    mon.flush()
    print(json.dumps(before))
    jitwatch.uninstall()
    """
)


def test_builtins_are_known_and_created_by_name() -> None:
    assert "triton" in BUILTIN and "triton" in registry()
    (backend,) = create(["triton"])
    assert backend.name == "triton" and backend.label == "Triton kernel"
    assert create([]) == []


def test_unknown_backend_is_a_clear_error() -> None:
    with pytest.raises(BackendError, match=r"unknown backend tritn in JITWATCH_BACKENDS; known: .*triton"):
        create(["tritn"])
    with pytest.raises(BackendError, match=r"unknown backends tritn, nosuch in JITWATCH_BACKENDS; known: .*triton"):
        create(["tritn", "triton", "nosuch"])


def _distribution(site: Path) -> None:
    """What ``pip install toyjit-jitwatch`` would leave: a .dist-info with the entry point."""
    dist = site / "toyjit_jitwatch-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: toyjit-jitwatch\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\ntoyjit = jitwatch_toyjit:ToyJitBackend\n")


@pytest.mark.slow
def test_out_of_tree_backend_through_the_entry_point(tmp_path: Path) -> None:
    site = tmp_path / "site"
    _distribution(site)
    journal = tmp_path / "journal"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JITWATCH_", "OTEL_"))}
    env.update(
        JITWATCH_DIR=str(journal),
        PYTHONPATH=os.pathsep.join([str(site), str(TOY), env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        OTEL_SDK_DISABLED="true",
    )
    out = subprocess.run([sys.executable, "-c", WORKER], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1])["toyjit"] == "waiting"
    assert "post-warmup compile of toyjit kernel 'rope'" in out.stderr

    port = free_port()
    sidecar = subprocess.Popen(
        [sys.executable, "-m", "jitwatch", "serve", "--port", str(port), "--journal-dir", str(journal)],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                status = httpx.get(base + "/jit?backend=toyjit", timeout=2).json()
                break
            except httpx.HTTPError:
                assert time.monotonic() < deadline and sidecar.poll() is None, "sidecar did not start"
                time.sleep(0.2)
        (kernel,) = status["kernels"]
        assert (kernel["backend"], kernel["name"]) == ("toyjit", "rope")
        assert (kernel["compiles_warmup"], kernel["compiles_serving"]) == (1, 1)
        (serving,) = status["recent_serving_compiles"]
        assert serving["backend"] == "toyjit" and serving["key"] == "(16, 64)"
        ((rank,),) = [status["ranks"]]
        assert {b["name"]: b["state"] for b in rank["backends"]}["toyjit"] == "active"
        events = httpx.get(base + "/jit/events?backend=toyjit&kind=compile").json()
        assert [e["attrs"]["shape"] for e in events] == [[16, 64], [8, 64]]
        samples = {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for f in parse_text(httpx.get(base + "/metrics").text)
            for s in f.samples
        }
        assert samples[("jitwatch_compiles_total", (("backend", "toyjit"), ("phase", "serving")))] == 1
        assert samples[("jitwatch_compile_seconds_total", (("backend", "toyjit"), ("kernel", "rope")))] >= 0
        serving = (("backend", "toyjit"), ("kernel", "rope"), ("rank", "0"))
        assert samples[("jitwatch_serving_compiles_total", serving)] == 1
        info = (("backend", "toyjit"), ("rank", "0"), ("state", "active"), ("version", ""))  # no toyjit dist
        assert samples[("jitwatch_backend_info", info)] == 1
    finally:
        sidecar.terminate()
        sidecar.wait(10)


def test_docs_show_the_tested_example_backend() -> None:
    """docs/architecture.md quotes the example backend exactly as this test runs it."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "architecture.md").read_text(encoding="utf-8")
    code = (TOY / "jitwatch_toyjit.py").read_text(encoding="utf-8")
    body = code.split("from __future__ import annotations\n", 1)[1].strip()
    assert body in doc
