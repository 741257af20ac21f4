"""Benchmark 2: compiles across request sizes — ``num_tokens`` specialized vs ``do_not_specialize``.

For each kernel variant (a fresh ``JITFunction``, so its in-memory cache starts empty) and a fresh
``TRITON_CACHE_DIR``, run one slot-mapping computation per token count in ``--sizes`` (the same
engine tensors every time, as in serving) under an installed monitor, and count:

* compiles jitwatch journaled (``compile`` events), and
* keys in Triton's own in-memory cache (``JITFunction.device_caches``) — the cross-check;

plus which sizes compiled and the wall time of each size's first call (the stall a request of a
new size class pays). On a CPU machine the kernel is compiled through the compile-only driver
(``kernel.warmup``, real ttir → cubin compiles for sm_90; nothing launches); on a GPU it
launches and its output is checked against the torch reference.

Run: ``python benchmarks/bench_recompiles.py --out results/recompiles.json`` (``--device cpu|cuda``).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import scratch_dir, write_result

DEFAULT_SIZES = (1, 2, 3, 7, 16, 17, 32, 33, 64, 100, 128, 512, 1000, 2048)
MAX_NUM_TOKENS = 4096
BLOCK_SIZE = 16


def _run_variant(specialize: bool, sizes: list[int], device: str) -> dict[str, Any]:
    import torch

    from jitwatch.core.events import Phase
    from jitwatch.kernels.slot_mapping import (
        cached_keys,
        compute_slot_mapping,
        kernel_name,
        new_slot_mapping_kernel,
        slot_mapping_reference,
    )
    from jitwatch.testing import monitored

    kernel = new_slot_mapping_kernel(specialize)
    gen = torch.Generator().manual_seed(1)
    table = torch.randint(1, 1 << 16, (64, 512), dtype=torch.int32, generator=gen).to(device)
    out = torch.empty(MAX_NUM_TOKENS, dtype=torch.int64, device=device)
    per_size = []
    with monitored("warn", compile_only=device == "cpu", triton_cache_dir=scratch_dir("jw-bench-recompiles-")) as h:
        h.monitor.activate()  # no warmup: every compile here is a serving-phase compile
        for n in sizes:
            reqs = max(1, min(4, n))
            lengths = [n // reqs] * reqs
            lengths[-1] += n - sum(lengths)
            qsl = torch.zeros(reqs + 1, dtype=torch.int32)
            qsl[1:] = torch.cumsum(torch.tensor(lengths), 0)
            pos = torch.cat([torch.arange(length) for length in lengths]).to(torch.int64)
            before = len(cached_keys(kernel) or ())
            t0 = time.perf_counter()
            compute_slot_mapping(
                qsl.to(device),
                pos.to(device),
                table,
                BLOCK_SIZE,
                out,
                num_tokens=n,
                max_num_tokens=MAX_NUM_TOKENS,
                kernel=kernel,
            )
            if device == "cuda":
                torch.cuda.synchronize()
            first_call = time.perf_counter() - t0
            if device == "cuda":
                ref = slot_mapping_reference(qsl, pos, table.cpu(), BLOCK_SIZE, MAX_NUM_TOKENS)
                assert torch.equal(out.cpu(), ref), f"wrong slot mapping at {n} tokens"
            after = len(cached_keys(kernel) or ())
            per_size.append({"num_tokens": n, "new_keys": after - before, "first_call_ms": first_call * 1e3})
        events = h.compiles(phase=Phase.SERVING, kernel=kernel_name(kernel))
        keys = sorted(cached_keys(kernel) or ())
    return {
        "specialize_num_tokens": specialize,
        "compiles_journaled": len(events),
        "triton_cache_keys": len(keys),
        "compiled_at_sizes": [p["num_tokens"] for p in per_size if p["new_keys"]],
        "per_size": per_size,
        "compile_ms": [round((e.duration_s or 0) * 1e3, 2) for e in events],
        "num_tokens_signature": sorted({str((e.attrs.get("signature") or {}).get("num_tokens")) for e in events}),
        "num_tokens_constexpr": sorted({str((e.attrs.get("constexprs") or {}).get("num_tokens")) for e in events}),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out")
    ap.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    ap.add_argument("--sizes", default=",".join(map(str, DEFAULT_SIZES)))
    args = ap.parse_args()
    import torch

    device = args.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    sizes = [int(x) for x in args.sizes.split(",")]
    if len(sizes) < 8:
        raise SystemExit("use at least 8 token counts")
    variants = {
        "specialized": _run_variant(True, sizes, device),
        "do_not_specialize": _run_variant(False, sizes, device),
    }
    doc = write_result(args.out, "recompiles", {"device": device, "sizes": sizes, "variants": variants})
    where = doc["machine"].get("gpu") or f"{doc['machine']['cpu']} (compile-only, sm_90)"
    print(f"recompiles over {len(sizes)} token counts {sizes} on {device} ({where})")
    for name, v in variants.items():
        stall = max((p["first_call_ms"] for p in v["per_size"][1:]), default=0.0)
        print(
            f"{name:<18} compiles {v['compiles_journaled']} (Triton cache keys {v['triton_cache_keys']}) at sizes "
            f"{v['compiled_at_sizes']}; compile ms {v['compile_ms']}; worst later first-call {stall:.2f} ms"
        )


if __name__ == "__main__":
    main()
