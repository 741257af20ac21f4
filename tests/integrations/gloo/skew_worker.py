"""One rank of the gloo skew test (tests/integrations/gloo/test_gloo_skew.py): a real
``torch.distributed`` gloo group on CPU doing all-reduces, jitwatch installed, Triton's compile-only
driver. Rank ``COMPILER`` compiles a new specialization during serving step 2, padded by a
``knobs.runtime.jit_cache_hook`` (chained by jitwatch, whose own hook begins the compile first)
that waits for the test's release file — a compile that runs, or hangs, until the test has seen
it — while the other ranks wait in the all-reduce. (Not a compilation listener: outside ``error``
mode jitwatch's listener ends the compile before calling the one it chains.) Prints
``step <i> allreduce_wait <seconds>`` per step.

argv: rank world_size init_port journal_dir release_file
"""

import os
import sys
import time
import warnings
from datetime import timedelta
from pathlib import Path

warnings.filterwarnings("ignore")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

import jitwatch  # noqa: E402
from jitwatch.backends.triton.compile_only import activate  # noqa: E402

COMPILER = 1
PAD = [False]


@triton.jit
def allreduce_prep_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2, mask=mask)


def say(msg: str) -> None:
    sys.stdout.write(msg + "\n")
    sys.stdout.flush()


def main() -> None:
    rank, world, port, journal, release = (
        int(sys.argv[1]),
        int(sys.argv[2]),
        int(sys.argv[3]),
        sys.argv[4],
        Path(sys.argv[5]),
    )

    def pad(*args: object, **kwargs: object) -> None:
        # After jitwatch's jit_cache_hook: the compile is in flight. Hold it until released (90 s max).
        if PAD[0]:
            end = time.monotonic() + 90
            while not release.exists() and time.monotonic() < end:
                time.sleep(0.05)

    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world, timeout=timedelta(seconds=300)
    )
    activate(90)
    triton.knobs.runtime.jit_cache_hook = pad  # installed first: jitwatch chains to it
    mon = jitwatch.install(mode="warn", rank=rank, journal_dir=journal)
    x = torch.zeros(256, dtype=torch.float32)
    with mon.warmup():
        allreduce_prep_kernel.warmup(x, 64, BLOCK=64, grid=(1,))  # n % 16 == 0
    mon.flush()
    dist.barrier()
    say("serving")
    t = torch.ones(4)
    for step in range(4):
        with mon.request(f"step-{step}"):
            if rank == COMPILER and step == 2:
                PAD[0] = True
                allreduce_prep_kernel.warmup(x, 7, BLOCK=64, grid=(1,))  # new class: n neither 1 nor %16
                PAD[0] = False
            t0 = time.monotonic()
            dist.all_reduce(t)
            waited = time.monotonic() - t0
        say(f"step {step} allreduce_wait {waited:.3f}")
    assert t[0].item() == world**4
    mon.flush()
    dist.barrier()
    dist.destroy_process_group()
    jitwatch.uninstall()
    say("done")


if __name__ == "__main__":
    os.environ.setdefault("JITWATCH_HEARTBEAT_SECONDS", "1")
    main()
