"""``tests/tools.py``: under ``JITWATCH_TEST_TOOLS_REQUIRED=1`` (``make test-core``) a missing tool
fails its tests, module-level needs (the Grafana SDK) included; without the variable they skip.
A real pytest run in a subprocess, with the Grafana SDK made unimportable."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.tools import REQUIRED_ENV

ROOT = Path(__file__).resolve().parents[1]
MODULES = ["tests/observability/test_dashboards.py", "tests/observability/test_prometheus_e2e.py"]


def run_without_sdk(tmp_path: Path, required: bool) -> subprocess.CompletedProcess[str]:
    fake = tmp_path / "fake"
    fake.mkdir(exist_ok=True)
    (fake / "grafana_foundation_sdk.py").write_text(
        'raise ModuleNotFoundError("No module named grafana_foundation_sdk", name="grafana_foundation_sdk")\n'
    )
    env = {k: v for k, v in os.environ.items() if k != REQUIRED_ENV}
    env["PYTHONPATH"] = os.pathsep.join([str(fake), str(ROOT)])
    if required:
        env[REQUIRED_ENV] = "1"
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--collect-only", "-rs", *MODULES],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("required", [False, True])
def test_a_missing_grafana_sdk_fails_the_modules_that_need_it_only_when_required(
    tmp_path: Path, required: bool
) -> None:
    got = run_without_sdk(tmp_path, required)
    out = got.stdout + got.stderr
    if required:
        assert got.returncode != 0, out
        assert out.count("grafana-foundation-sdk not installed") >= len(MODULES), out
        assert f"{REQUIRED_ENV}=1" in out, out
    else:
        assert got.returncode in (0, 5), out  # 5: nothing collected (both modules skipped)
        assert "SKIPPED [2]" in out and "grafana-foundation-sdk not installed" in out, out
        assert "error" not in out.lower(), out
