"""jitwatch.importhook: callbacks after the host imports a module, never importing it ourselves."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from jitwatch import importhook


@pytest.fixture
def pkg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh importable package (unique name) in a temp directory on sys.path."""
    name = f"jw_ih_{tmp_path.name.replace('-', '_')}"
    (tmp_path / name).mkdir()
    (tmp_path / name / "__init__.py").write_text("VALUE = 41\nfrom . import sub\n")
    (tmp_path / name / "sub.py").write_text("VALUE = 2\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    for mod in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
        del sys.modules[mod]


def test_callback_runs_after_the_host_imports(pkg: str) -> None:
    seen: list[int] = []
    importhook.when_imported(pkg, lambda m: seen.append(m.VALUE + m.sub.VALUE))
    assert pkg not in sys.modules and seen == []  # registering imported nothing
    assert importhook.waiting() == {pkg: 1}
    module = __import__(pkg)
    assert seen == [43]  # the module's code (and its own imports) had run
    assert module.__spec__.loader is module.__loader__  # the original loader is put back
    assert "jitwatch" not in type(module.__loader__).__module__
    assert importhook.waiting() == {}
    assert all("jitwatch" not in type(f).__module__ for f in sys.meta_path)  # the finder stepped aside


def test_already_imported_calls_at_once(pkg: str) -> None:
    __import__(pkg)
    seen: list[str] = []
    importhook.when_imported(pkg, lambda m: seen.append(m.__name__))
    assert seen == [pkg]


def test_submodule_and_cancel(pkg: str) -> None:
    seen: list[str] = []
    cancel = importhook.when_imported(f"{pkg}.sub", lambda m: seen.append("sub"))
    cancel_other = importhook.when_imported(pkg, lambda m: seen.append("never"))
    cancel_other()
    __import__(f"{pkg}.sub")
    assert seen == ["sub"]
    cancel()  # a no-op once it ran
    assert importhook.waiting() == {}


def test_failing_callback_never_breaks_the_import(pkg: str) -> None:
    errors: list[str] = []

    def boom(_m: object) -> None:
        raise RuntimeError("jitwatch bug")

    importhook.when_imported(pkg, boom, on_error=lambda name, exc: errors.append(f"{name}: {exc}"))
    module = __import__(pkg)
    assert module.VALUE == 41
    assert errors == [f"{pkg}: jitwatch bug"]


def test_failed_import_keeps_the_callback_waiting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    name = f"jw_ih_bad_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text("raise ImportError('not yet')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen: list[str] = []
    cancel = importhook.when_imported(name, lambda m: seen.append("ran"))
    with pytest.raises(ImportError, match="not yet"):
        __import__(name)
    assert seen == [] and importhook.waiting() == {name: 1}
    (tmp_path / f"{name}.py").write_text("OK = 1\n")
    sys.modules.pop(name, None)
    import importlib

    importlib.invalidate_caches()
    __import__(name)
    assert seen == ["ran"]
    cancel()
    sys.modules.pop(name, None)


def test_installing_every_backend_imports_no_library(tmp_path: Path) -> None:
    """A fresh interpreter: jitwatch.install() with every backend imports neither triton nor torch."""
    code = textwrap.dedent(
        """
        import sys
        import jitwatch
        mon = jitwatch.install(tracer_provider=False)
        libraries = ("triton", "torch", "tilelang", "cutlass", "flashinfer", "deep_gemm")
        heavy = sorted(m for m in libraries if m in sys.modules)
        states = {n: s.state for n, s in mon.backend_statuses.items()}
        import triton  # the host imports it: the backend hooks in now
        print(heavy, states, {n: s.state for n, s in mon.backend_statuses.items()})
        jitwatch.uninstall()
        """
    )
    env = {**os.environ, "JITWATCH_DIR": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120, check=True)
    heavy, before, after = out.stdout.strip().split(" {", 1)[0], *out.stdout.strip().split(" {")[1:]
    assert heavy == "[]", out.stdout
    assert "'triton': 'waiting'" in before and "'triton': 'active'" in after, out.stdout
