"""The plugin's wrappers and failure policy, on a stand-in worker (fast; no engine).

The engine tests check the same wrappers inside real vLLM workers; these pin down what is awkward to
provoke there: the ``sample_tokens`` half of a request, failures, error mode, the post-import patch.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

import jitwatch
from jitwatch.core.events import EventKind, Phase
from jitwatch.integrations.vllm import plugin
from jitwatch.testing import compile_only_driver, read_events

pytestmark = pytest.mark.vllm


class StandInWorker:
    """The methods vLLM's executor calls on a V1 worker, in vLLM's order."""

    def __init__(self, compile_in_sampling: bool = False) -> None:
        self.rank = 0
        self.local_rank = 0
        self.calls: list[str] = []
        self.compile_in_sampling = compile_in_sampling
        self.fail: BaseException | None = None  # raised by the next execute_model
        self.fail_sampling: BaseException | None = None  # raised by the next sample_tokens

    def init_device(self) -> None:
        self.calls.append("init_device")

    def compile_or_warm_up_model(self) -> str:
        self.calls.append("warmup")
        return "compiled"

    def execute_model(self, scheduler_output: Any) -> None:
        self.calls.append("execute")
        if self.fail is not None:
            raise self.fail
        return None  # sampling follows in sample_tokens (vLLM V1)

    def sample_tokens(self, grammar_output: Any) -> str:
        self.calls.append("sample")
        if self.fail_sampling is not None:
            raise self.fail_sampling
        if self.compile_in_sampling:
            from jitwatch.kernels.slot_mapping import compute_slot_mapping, new_slot_mapping_kernel

            table = torch.zeros(1, 4, dtype=torch.int32)
            compute_slot_mapping(
                torch.tensor([0, 1], dtype=torch.int32),
                torch.zeros(1, dtype=torch.int64),
                table,
                16,
                torch.empty(4, dtype=torch.int64),
                kernel=new_slot_mapping_kernel(),
            )
        return "tokens"


def step(*req_ids: str) -> Any:
    return SimpleNamespace(
        total_num_scheduled_tokens=len(req_ids),
        scheduled_new_reqs=[SimpleNamespace(req_id=r) for r in req_ids],
        scheduled_cached_reqs=SimpleNamespace(req_ids=[]),
    )


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    journal = tmp_path / "journal"
    monkeypatch.setenv("JITWATCH_DIR", str(journal))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "tc"))
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    monkeypatch.delenv("JITWATCH_MODE", raising=False)
    return journal


def test_request_spans_execute_and_sample_and_owns_its_compiles(env: Path) -> None:
    worker = StandInWorker(compile_in_sampling=True)
    assert plugin.attach(worker) is not None and plugin.attach(worker) is None  # idempotent
    worker.init_device()
    assert worker.compile_or_warm_up_model() == "compiled"
    with compile_only_driver(90):
        assert worker.execute_model(step("req-a", "req-b")) is None
        assert worker.sample_tokens(None) == "tokens"
    assert worker.calls == ["init_device", "warmup", "execute", "sample"]
    mon = jitwatch.get_monitor()
    assert mon is not None and mon.flush()
    events = read_events(env)
    (first,) = [e for e in events if e.kind is EventKind.FIRST_REQUEST]
    assert first.attrs["request"] == "vllm:req-a,req-b"
    (compile_ev,) = [e for e in events if e.kind is EventKind.COMPILE]
    assert compile_ev.phase is Phase.SERVING and compile_ev.attrs["request_id"] == first.attrs["request_id"]
    assert [e.kind for e in events if e.kind in (EventKind.WARMUP_START, EventKind.WARMUP_COMPLETE)] == [
        EventKind.WARMUP_START,
        EventKind.WARMUP_COMPLETE,
    ]


class StepError(RuntimeError):
    pass


def _fault_tolerant(worker: StandInWorker) -> None:
    worker.vllm_config = SimpleNamespace(parallel_config=SimpleNamespace(enable_fault_tolerance=True))  # type: ignore[attr-defined]


def test_a_failed_step_is_the_exit_and_the_first_failure_names_it(env: Path) -> None:
    """vLLM catches an exception out of a worker's step and ends the process normally: the plugin
    notes it for the exit record. Without fault tolerance (vLLM's default) a failed step is the
    engine's end: a step that still succeeds afterwards (async scheduling sent it before the engine
    read the failure) forgets nothing, and a later failure (a follow-on) does not replace the first;
    a ``SystemExit`` inside a step (vLLM's SIGTERM handler) is a stop."""
    from jitwatch.store.journal import Journal

    worker = StandInWorker()
    plugin.attach(worker)
    worker.init_device()
    worker.compile_or_warm_up_model()
    mon = jitwatch.get_monitor()
    assert mon is not None
    worker.fail = SystemExit()
    with pytest.raises(SystemExit):
        worker.execute_model(step("r0"))
    assert mon._caught_exception_type is None
    worker.fail = StepError("secret-token-123")
    with pytest.raises(StepError):
        worker.execute_model(step("r1"))
    worker.fail = None
    worker.execute_model(step("r2"))  # queued before the engine read the failure
    worker.sample_tokens(None)
    worker.fail = AssertionError("a follow-on")
    with pytest.raises(AssertionError):
        worker.execute_model(step("r3"))
    assert mon._caught_exception_type == f"{__name__}.StepError"
    mon._at_exit()  # what the interpreter's exit runs after vLLM's worker loop returned
    with Journal(env, readonly=True) as j:
        (row,) = j.workers()
    assert row.exit_exception == f"{__name__}.StepError" and row.stopped_ts is None
    assert "secret-token-123" not in str(row.attrs)


def test_with_fault_tolerance_a_later_step_forgets_the_failure(env: Path) -> None:
    """With vLLM's fault tolerance on (``parallel_config.enable_fault_tolerance``) the engine can
    go on after a failed step: a later successful step forgets it, and a later failure is noted
    afresh. A new worker (engine) in the process forgets an earlier one's failure."""
    worker = StandInWorker()
    _fault_tolerant(worker)
    plugin.attach(worker)
    worker.init_device()
    worker.compile_or_warm_up_model()
    mon = jitwatch.get_monitor()
    assert mon is not None
    worker.fail = ValueError("x")
    with pytest.raises(ValueError):
        worker.execute_model(step("r1"))
    assert mon._caught_exception_type == "ValueError"
    worker.fail = None
    worker.execute_model(step("r2"))
    worker.sample_tokens(None)
    assert mon._caught_exception_type is None
    worker.fail = StepError("y")
    with pytest.raises(StepError):
        worker.execute_model(step("r3"))
    assert mon._caught_exception_type == f"{__name__}.StepError"
    again = StandInWorker()  # the caller built a new engine in this process
    plugin.attach(again)
    again.init_device()
    assert mon._caught_exception_type is None


def test_a_failed_sampling_is_noted_and_ends_its_step(env: Path) -> None:
    """``sample_tokens`` raising (the second half of a V1 step) is noted like a failed
    ``execute_model``, and the step's request marker is closed all the same."""
    worker = StandInWorker()
    _fault_tolerant(worker)
    state = plugin.attach(worker)
    assert state is not None
    worker.init_device()
    worker.compile_or_warm_up_model()
    mon = jitwatch.get_monitor()
    assert mon is not None
    worker.execute_model(step("r1"))
    assert state.pending is not None
    worker.fail_sampling = StepError("secret-token-123")
    with pytest.raises(StepError):
        worker.sample_tokens(None)
    assert state.pending is None and mon._caught_exception_type == f"{__name__}.StepError"
    worker.fail_sampling = None
    worker.execute_model(step("r2"))
    worker.sample_tokens(None)
    assert mon._caught_exception_type is None and state.pending is None


def test_a_failed_step_is_not_kept_alive(env: Path) -> None:
    """Only the type's name is kept: the exception, its traceback and the failed step's frames
    (tensors on a real worker) are freed when vLLM lets go of them."""
    import gc
    import weakref

    worker = StandInWorker()
    plugin.attach(worker)
    worker.init_device()
    worker.compile_or_warm_up_model()
    worker.fail = StepError("x")
    ref = weakref.ref(worker.fail)
    try:
        worker.execute_model(step("r1"))
    except StepError:
        pass
    worker.fail = None
    gc.collect()
    assert ref() is None


def test_empty_steps_are_not_requests(env: Path) -> None:
    worker = StandInWorker()
    plugin.attach(worker)
    worker.init_device()
    worker.compile_or_warm_up_model()
    worker.execute_model(step())  # no scheduled tokens
    worker.sample_tokens(None)
    mon = jitwatch.get_monitor()
    assert mon is not None and mon.requests_seen == 0 and not mon.first_request_done


def test_failure_is_logged_counted_and_vllm_keeps_going(env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JITWATCH_QUEUE_SIZE", "not-a-number")  # install() raises ConfigError
    before = plugin.plugin_errors
    worker = StandInWorker()
    plugin.attach(worker)
    worker.init_device()
    assert worker.compile_or_warm_up_model() == "compiled"
    assert worker.execute_model(step("r")) is None and worker.sample_tokens(None) == "tokens"
    assert plugin.plugin_errors >= before + 2  # install tried at init_device and again at warmup
    assert jitwatch.get_monitor() is None


def test_error_mode_raises(env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JITWATCH_QUEUE_SIZE", "not-a-number")
    monkeypatch.setenv("JITWATCH_MODE", "error")
    worker = StandInWorker()
    plugin.attach(worker)
    with pytest.raises(plugin.PluginError, match="install failed"):
        worker.init_device()


def test_off_mode_registers_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JITWATCH_MODE", "off")
    monkeypatch.setattr(plugin, "_registered", False)
    finders = list(sys.meta_path)
    plugin.register()
    assert sys.meta_path == finders and plugin._registered is False


def test_worker_base_patched_when_vllm_imports_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """register() before the worker module is imported: it is patched the moment it is."""
    (tmp_path / "jw_fake_worker_base.py").write_text("class WorkerBase:\n    def __init__(self):\n        pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(plugin, "WORKER_BASE_MODULE", "jw_fake_worker_base")
    monkeypatch.setattr(plugin, "_registered", False)
    try:
        plugin.register()
        assert "jw_fake_worker_base" not in sys.modules
        module = importlib.import_module("jw_fake_worker_base")
        assert getattr(module.WorkerBase.__init__, plugin._MARK, False)
    finally:
        sys.modules.pop("jw_fake_worker_base", None)


def test_worker_base_is_patched_in_this_vllm() -> None:
    """The real ``vllm.v1.worker.worker_base.WorkerBase.__init__`` takes the wrapper (vllm 0.32)."""
    from vllm.v1.worker import worker_base

    original = worker_base.WorkerBase.__init__
    try:
        plugin._patch_worker_base(worker_base)
        assert getattr(worker_base.WorkerBase.__init__, plugin._MARK, False)
        plugin._patch_worker_base(worker_base)  # twice: still one wrapper
        assert worker_base.WorkerBase.__init__.__wrapped__ is original
    finally:
        worker_base.WorkerBase.__init__ = original


def test_manifest_replayed_inside_warmup(env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import jitwatch.warmup.replay

    phases: list[str] = []
    monkeypatch.setenv("JITWATCH_MANIFEST", str(tmp_path / "warmup.json"))
    monkeypatch.setattr(jitwatch.warmup.replay, "replay_from_env", lambda mon, **kw: phases.append(mon.phase.value))
    worker = StandInWorker()
    plugin.attach(worker)
    worker.init_device()
    worker.compile_or_warm_up_model()
    assert phases == ["warmup"]


def test_a_journal_dir_with_an_unknown_user_does_not_stop_vllm(monkeypatch: pytest.MonkeyPatch) -> None:
    """JITWATCH_DIR='~nosuchuser/x' raised pathlib's RuntimeError from Settings.for_worker(), which
    register() (it catches ConfigError: report, go on) let through: vLLM stopped at plugin load
    in warn mode. Since 354d219 a ConfigError: reported and counted, vLLM goes on."""
    monkeypatch.setenv("JITWATCH_DIR", "~jitwatch-no-such-user-17/x")
    monkeypatch.delenv("JITWATCH_MODE", raising=False)
    monkeypatch.setattr(plugin, "_registered", False)
    before = plugin.plugin_errors
    plugin.register()  # does not raise
    assert plugin.plugin_errors == before + 1 and plugin._registered is False
