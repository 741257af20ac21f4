"""The Triton backend (``JITWATCH_BACKENDS=triton``): ``@triton.jit`` kernels through Triton's
JIT hooks, compilation listener and autotuning callbacks (Triton ≥ 3.4).

* :mod:`.backend` — :class:`TritonBackend`, the adapter from Triton's payloads to captures;
* :mod:`.hooks` — :class:`~.hooks.HookSet`, jitwatch's callables in Triton's hook slots, chained;
* :mod:`.keys` — Triton's specialization keys, parsed (never evaluated);
* :mod:`.resolve` — a kernel by module and qualified name, imported under an allow-list;
* :mod:`.compile_only` — a driver that compiles for a CUDA target on a machine without a GPU.

Importing this package does not import Triton.
"""

from jitwatch.backends.triton.backend import TritonBackend

__all__ = ["TritonBackend"]
