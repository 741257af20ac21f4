"""The demo's worker process: a tiny "inference engine" whose only Triton work is real.

Run by ``jitwatch demo`` (:mod:`jitwatch.demo`) as ``python -m jitwatch.demo.worker``, like a
real worker: its own process, the shared journal directory, ``TRITON_CACHE_DIR`` from the parent.

Scenario:

1. ``jitwatch.install()`` (labelled ``jitwatch_demo=worker``: :data:`jitwatch.demo.runner.DEMO_LABEL`),
   then ``with mon.warmup():`` replays the manifest ``JITWATCH_MANIFEST`` names
   (:func:`jitwatch.warmup.replay.replay_from_env`, the vLLM plugin's call: only modules under
   ``JITWATCH_MANIFEST_ALLOW`` are imported), if set, and runs
   :func:`jitwatch.warmup.slot_mapping.warmup_slot_mapping` on the engine's persistent block table /
   buffers (real compiles), unless ``--no-warmup``.
2. Leaving the block activates the monitor (``/readyz`` flips to 200).
3. Serves :data:`REQUEST_STREAM` (engine steps with >= 5 different token counts) through
   :func:`jitwatch.kernels.slot_mapping.compute_slot_mapping`, each inside ``mon.request()``.
4. From the step of index :data:`ZERO_FROM_STEP` (step 3) on, freed KV blocks are zeroed with
   :func:`jitwatch.kernels.kv_blocks.zero_kv_blocks`, a kernel warmup does not cover: one
   serving-phase compile.
5. The torch.compile story beside it: each step ends with a sampler compiled by the real
   ``torch.compile`` (:func:`make_sampler`; Dynamo with its ``eager`` backend, so it costs
   milliseconds on CPU). Warmup ran it for one request only (like an engine's dummy run), so the
   first step that batches two requests recompiles it during serving — ``/jit`` shows Dynamo's
   reason (``0/0: tensor 'logits' size mismatch at index 0. expected 1, actual 2``). Dynamo then
   makes the batch dimension dynamic: later batch sizes do not recompile.

With ``JITWATCH_MODE=error`` the serving compile in step 3 (request 3, ``step-3``) raises
:class:`jitwatch.ServingCompileError` (by design); the worker then emits
``{"event": "serving_compile_error", "kernel": ...}`` and exits with :data:`ERROR_MODE_EXIT`, without
a traceback, and the parent prints one line about it.

On a CUDA GPU the kernels launch; on CPU they are compiled with the compile-only driver and the
torch reference computes the values (the report says which). Progress goes to stdout as JSON
lines (``{"event": ...}``) for the parent; logs go to stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import signal
import sys
import time
import warnings
from dataclasses import dataclass, field
from typing import Any

REQUEST_STREAM: list[list[int]] = [[7], [1], [10, 6], [33], [60, 40], [5], [32, 16, 16], [2]]
"""Engine steps; each lists the new tokens of the requests batched in it (totals 7, 1, 16, 33, 100,
5, 64, 2: the three Triton int classes ``== 1``, ``% 16 == 0`` and other)."""

ERROR_MODE_EXIT = 3
"""Exit code when ``JITWATCH_MODE=error`` stopped the worker on a serving-phase compile."""

ZERO_FROM_STEP = 2
"""First step (0-based) after which finished requests' blocks are zeroed (the uncovered kernel)."""


def make_sampler() -> Any:
    """The demo engine's sampler: ``softmax(logits / temperature)`` under ``torch.compile``
    (backend ``eager``: Dynamo traces and guards for real, no code generation). ``None`` when
    torch.compile is unavailable."""
    try:
        import torch
        import torch._dynamo  # hooks the torch_compile backend in (it waits for this import)
    except Exception:  # noqa: BLE001 - a torch without Dynamo: the demo runs without this step
        return None

    def sample_probs(logits: Any, temperature: float) -> Any:
        return torch.softmax(logits / temperature, dim=-1)

    return torch.compile(sample_probs, backend="eager")


SAMPLER_VOCAB = 64
"""Columns of the demo sampler's logits."""


def _emit(event: str, **fields: Any) -> None:
    sys.stdout.write(json.dumps({"event": event, **fields}) + "\n")
    sys.stdout.flush()


@dataclass
class DemoEngine:
    """Persistent buffers sized like a small vLLM engine (all on ``device``)."""

    device: Any
    specialize_num_tokens: bool = False
    max_num_reqs: int = 8
    max_blocks_per_req: int = 64
    block_size: int = 16
    max_num_tokens: int = 256
    num_kv_blocks: int = 128
    kv_block_numel: int = 16 * 64
    free_blocks: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        import torch

        from jitwatch.kernels.slot_mapping import get_slot_mapping_kernel

        dev = self.device
        self.kernel = get_slot_mapping_kernel(self.specialize_num_tokens)
        self.block_table = torch.zeros(self.max_num_reqs, self.max_blocks_per_req, dtype=torch.int32, device=dev)
        self.query_start_loc = torch.zeros(self.max_num_reqs + 1, dtype=torch.int32, device=dev)
        self.positions = torch.zeros(self.max_num_tokens, dtype=torch.int64, device=dev)
        self.slot_mapping = torch.zeros(self.max_num_tokens, dtype=torch.int64, device=dev)
        self.kv_cache = torch.ones(self.num_kv_blocks, self.kv_block_numel, dtype=torch.float16, device=dev)
        self.free_blocks = list(range(1, self.num_kv_blocks))  # block 0: the null block

    def sample(self, sampler: Any, n_reqs: int) -> None:
        """Run the compiled sampler on one row of logits per request (no-op without torch.compile)."""
        if sampler is None:
            return
        import torch

        sampler(torch.randn(n_reqs, SAMPLER_VOCAB, device=self.device), 0.7)

    def step(self, token_counts: list[int], zero_freed: bool, check: bool = False) -> dict[str, Any]:
        """Schedule one batch of new requests, map their slots, then finish them.

        ``check``: compare a GPU result with the torch reference (kept out of timed requests).
        """
        import torch

        from jitwatch.kernels.kv_blocks import zero_kv_blocks
        from jitwatch.kernels.slot_mapping import compute_slot_mapping, slot_mapping_reference

        n_reqs = len(token_counts)
        num_tokens = sum(token_counts)
        allocated: list[int] = []
        qsl = [0]
        pos: list[int] = []
        for r, n in enumerate(token_counts):
            blocks = [self.free_blocks.pop(0) for _ in range(math.ceil(n / self.block_size))]
            allocated += blocks
            self.block_table[r, : len(blocks)] = torch.tensor(blocks, dtype=torch.int32)
            qsl.append(qsl[-1] + n)
            pos += list(range(n))
        self.query_start_loc[: n_reqs + 1] = torch.tensor(qsl, dtype=torch.int32)
        self.positions[:num_tokens] = torch.tensor(pos, dtype=torch.int64)
        res = compute_slot_mapping(
            self.query_start_loc[: n_reqs + 1],
            self.positions,
            self.block_table,
            self.block_size,
            self.slot_mapping,
            num_tokens=num_tokens,
            max_num_tokens=self.max_num_tokens,
            kernel=self.kernel,
        )
        if res.source == "kernel" and check:  # check the GPU's answer against the reference
            ref = slot_mapping_reference(
                self.query_start_loc[: n_reqs + 1],
                self.positions,
                self.block_table,
                self.block_size,
                self.max_num_tokens,
            )
            if not torch.equal(ref, self.slot_mapping[: self.max_num_tokens]):
                raise RuntimeError("slot-mapping kernel disagrees with the torch reference")
        # The requests finish: their blocks go back to the pool, zeroed first from ZERO_FROM_STEP on.
        if zero_freed and allocated:
            zero_kv_blocks(self.kv_cache, torch.tensor(allocated, dtype=torch.int32, device=self.device))
        self.block_table[:n_reqs] = 0
        self.free_blocks += allocated
        if self.device.type == "cuda":
            torch.cuda.synchronize()
        return {"num_tokens": num_tokens, "requests": n_reqs, "source": res.source}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jitwatch.demo.worker")
    parser.add_argument("--journal-dir", required=True)
    parser.add_argument("--no-warmup", action="store_true")
    parser.add_argument("--specialize-num-tokens", action="store_true")
    parser.add_argument("--no-torch-compile", action="store_true", help="leave out the torch.compile sampler")
    parser.add_argument("--exit", action="store_true", help="exit after the scenario")
    parser.add_argument(
        "--exit-when-stdin-closes",
        action="store_true",
        help="with --exit: after the scenario, exit once stdin closes (jitwatch demo closes it when it has read "
        "/jit and /metrics of the serving worker; the clean exit then records the rank stopped)",
    )
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between steps after the scenario")
    args = parser.parse_args(argv)

    warnings.filterwarnings("ignore", message="TRITON_DEFAULT_FP_FUSION")
    stop = {"flag": False}

    def _stop(signum: int, frame: Any) -> None:
        stop["flag"] = True

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)

    import torch

    import jitwatch
    from jitwatch.backends.triton.compile_only import compile_only
    from jitwatch.warmup.replay import replay_from_env
    from jitwatch.warmup.slot_mapping import warmup_slot_mapping

    gpu = torch.cuda.is_available()
    device = torch.device("cuda" if gpu else "cpu")
    from jitwatch.config import Settings
    from jitwatch.core.identity import WorkerIdentity
    from jitwatch.demo.runner import DEMO_LABEL, DEMO_LABEL_VALUE

    # Labelled as the demo's worker, on its worker row: the next demo on this journal resets it
    # only when every process that wrote there has it (jitwatch.demo.runner.check_journal_writers).
    identity = WorkerIdentity.from_settings(Settings.for_worker())
    identity.labels[DEMO_LABEL] = DEMO_LABEL_VALUE
    mon = jitwatch.install(journal_dir=args.journal_dir, tracer_provider=None, identity=identity)
    engine = DemoEngine(device, specialize_num_tokens=args.specialize_num_tokens)
    sampler = None if args.no_torch_compile else make_sampler()
    _emit(
        "started",
        pid=os.getpid(),
        device=torch.cuda.get_device_name() if gpu else f"cpu (Triton compile-only, sm_{mon.settings.target_arch})",
        triton_cache_dir=os.environ.get("TRITON_CACHE_DIR"),
    )

    warm: dict[str, Any] = {"ran": False}
    t0 = time.perf_counter()
    with mon.warmup(**{"jitwatch.demo": True}):
        # JITWATCH_MANIFEST (+ JITWATCH_MANIFEST_ALLOW): replay a recorded manifest here, inside
        # warmup, as the vLLM plugin does; its compiles are warmup compiles. Never raises.
        # On CPU the kernels compile under the compile-only driver, as the engine's own calls do.
        with contextlib.nullcontext() if gpu else compile_only(mon.settings.target_arch):
            replayed = replay_from_env(mon)
        if replayed is not None:
            warm["manifest"] = replayed.summary()
        elif mon.settings.manifest is not None:
            warm["manifest_not_replayed"] = True  # replay_from_env logged why (unreadable, not a manifest, …)
        if not args.no_warmup:
            # --specialize-num-tokens reproduces the original engine: its warmup (a dummy run)
            # saw one token count only, so new request-size classes compile while serving.
            counts = [engine.max_num_tokens] if args.specialize_num_tokens else None
            res = warmup_slot_mapping(
                engine.block_table,
                engine.block_size,
                engine.max_num_tokens,
                slot_mappings=engine.slot_mapping,
                query_start_loc=engine.query_start_loc,
                positions=engine.positions,
                kernel=engine.kernel,
                num_tokens=counts,
            )
            warm |= {"ran": True, "kernel": res.kernel, "num_tokens": res.num_tokens, "keys_compiled": res.compiled}
            engine.sample(sampler, 1)  # the dummy run: one request only
    warm["seconds"] = time.perf_counter() - t0
    _emit("warmup_complete", **warm)

    try:
        served: list[dict[str, Any]] = []
        for i, counts in enumerate(REQUEST_STREAM):
            t = time.perf_counter()
            # steps are named from 1, like request ids: the third step is request 3 and "step-3"
            with mon.request(name=f"step-{i + 1}"):
                info = engine.step(counts, zero_freed=i >= ZERO_FROM_STEP)
                engine.sample(sampler, len(counts))
            info["latency_s"] = time.perf_counter() - t
            served.append(info)
        # On a GPU, replay the stream once more, untimed, checking every result against the reference.
        if served[0]["source"] == "kernel":
            with mon.request(name="check"):
                for counts in REQUEST_STREAM:
                    engine.step(counts, zero_freed=True, check=True)
        mon.flush()
        _emit("scenario_done", steps=served, source=served[0]["source"])

        if args.exit and args.exit_when_stdin_closes:
            sys.stdin.read()  # EOF: the parent has its snapshot of the serving worker
        i = 0
        while not args.exit and not stop["flag"]:
            time.sleep(args.interval)
            if stop["flag"]:
                break
            with mon.request():
                counts = REQUEST_STREAM[i % len(REQUEST_STREAM)]
                engine.step(counts, zero_freed=True)
                engine.sample(sampler, len(counts))
            i += 1
    except jitwatch.ServingCompileError as exc:
        # JITWATCH_MODE=error: the serving-phase compile raised from Triton's jit_post_compile_hook,
        # as designed. Report it to the parent (which prints one clear line), no traceback.
        mon.flush()
        _emit("serving_compile_error", kernel=getattr(exc, "kernel", None) or _kernel_of(str(exc)), message=str(exc))
        jitwatch.uninstall()
        return ERROR_MODE_EXIT
    mon.flush()
    jitwatch.uninstall()
    return 0


def _kernel_of(message: str) -> str | None:
    """The kernel name quoted in a :class:`jitwatch.ServingCompileError` message."""
    import re

    m = re.search(r"kernel '([^']+)'", message)
    return m.group(1) if m else None


if __name__ == "__main__":
    sys.exit(main())
