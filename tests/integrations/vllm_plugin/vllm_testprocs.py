"""vLLM V1 logits processors that inject behaviour into a worker's engine step. ``CompileInRequest``
compiles a Triton kernel inside the engine's request path.

Imported by vLLM worker processes (``PYTHONPATH`` points at this directory). The CPU backend runs no
Triton kernel of its own, so this stands in for a kernel that warmup missed: on the first step that
adds a real request to the batch (``update_state`` with ``batch_update.added``, called inside the
worker's ``execute_model``), it runs jitwatch's slot-mapping kernel through the compile-only driver —
a real ttir → cubin compile with every Triton hook firing, result from the torch reference.
``FailInRequest`` raises :class:`InjectedFault` there instead: a Python exception out of a worker's
``execute_model``, as a bug in a model's forward would raise.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from vllm.v1.sample.logits_processor import BatchUpdate, LogitsProcessor


class CompileInRequest(LogitsProcessor):
    def __init__(self, vllm_config: Any, device: torch.device, is_pin_memory: bool) -> None:
        self.done = False

    def is_argmax_invariant(self) -> bool:
        return True

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        return logits

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        if self.done or batch_update is None or not batch_update.added:
            return
        self.done = True
        only = os.environ.get("DIAG_COMPILE_RANK")  # compile on this rank only (the others go on)
        if only is not None and torch.distributed.is_initialized() and torch.distributed.get_rank() != int(only):
            return
        hold = os.environ.get("DIAG_HOLD_FILE")  # keep the compile in flight until this file exists
        if hold:
            with _held_compile(Path(hold)):
                self._compile()
        else:
            self._compile()

    def _compile(self) -> None:
        from jitwatch.kernels.slot_mapping import compute_slot_mapping, new_slot_mapping_kernel

        block_table = torch.zeros(4, 8, dtype=torch.int32)
        block_table[0, 0] = 1
        result = compute_slot_mapping(
            torch.tensor([0, 3], dtype=torch.int32),
            torch.arange(3, dtype=torch.int64),
            block_table,
            16,
            torch.empty(32, dtype=torch.int64),
            kernel=new_slot_mapping_kernel(),
        )
        print(f"COMPILE_IN_REQUEST source={result.source} slots={result.slot_mapping[:3].tolist()}", flush=True)


class InjectedFault(RuntimeError):
    """Raised inside a worker's engine step by :class:`FailInRequest`."""


class FailInRequest(LogitsProcessor):
    def __init__(self, vllm_config: Any, device: torch.device, is_pin_memory: bool) -> None:
        pass

    def is_argmax_invariant(self) -> bool:
        return True

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        return logits

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        if batch_update is not None and batch_update.added:
            raise InjectedFault("injected by the test (this message must not reach the journal)")


@contextmanager
def _held_compile(release: Path, limit_s: float = 120.0) -> Iterator[None]:
    """Wrap the installed ``knobs.compilation.listener`` (jitwatch's, chained) so the compile waits
    inside ``triton.compile`` until ``release`` exists: a compile in flight for as long as a test needs."""
    from triton import knobs

    previous = knobs.compilation.listener

    def held(*args: Any, **kwargs: Any) -> Any:
        end = time.monotonic() + limit_s
        while not release.exists() and time.monotonic() < end:
            time.sleep(0.05)
        return previous(*args, **kwargs) if previous is not None else None

    knobs.compilation.listener = held
    try:
        yield
    finally:
        knobs.compilation.listener = previous
