"""A kernel compiled the listener-only way (a direct ``triton.compile``, as Inductor compiles its
kernels) and real journals of such compiles, for the coverage tests of ``tests/views`` and the
sidecar's (compile-only driver, sm_90)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch
import triton
import triton.language as tl

from jitwatch.testing import fresh_kernel_cache, monitored


@triton.jit
def add_one(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=mask) + 1.0, mask=mask)


def direct_compile(block: int) -> str:
    """``triton.compile`` of ``add_one`` called directly: a listener-only compile. Returns Triton's
    cache hash (the key the event gets)."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    src = ASTSource(
        fn=add_one, signature={"x_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}, constexprs={(2,): block}
    )
    return str(triton.compile(src, target=GPUTarget("cuda", 90, 32)).hash)


def jit_compile(block: int) -> None:
    """A JIT compile of ``add_one`` (``JITFunction.warmup``: a compile with specialization data)."""
    add_one.warmup(torch.zeros(1024), 1000, BLOCK=block, grid=(1,))


def journal_of(
    directory: Path,
    *,
    warm: Sequence[int] = (),
    serve: Sequence[int] = (),
    jit_warm: Sequence[int] = (),
) -> dict[int, str]:
    """One worker's real journal in ``directory / "j"`` (Triton cache in ``directory / "c"``): the
    direct compiles of the ``warm`` BLOCK values and JIT compiles of ``jit_warm`` in warmup, then
    direct compiles of ``serve`` in serving. Returns BLOCK → cache hash of the direct compiles."""
    fresh_kernel_cache(add_one)
    hashes: dict[int, str] = {}
    with monitored(journal_dir=directory / "j", triton_cache_dir=directory / "c") as h:
        with h.monitor.warmup():
            for block in jit_warm:
                jit_compile(block)
            for block in warm:
                hashes[block] = direct_compile(block)
        for block in serve:
            got = direct_compile(block)
            assert hashes.setdefault(block, got) == got  # the same source, options and target: the same hash
        h.monitor.flush()
    return hashes
