"""FlashInfer JIT backend: see :mod:`jitwatch.backends.flashinfer.backend`.

Importing this package imports nothing of FlashInfer: the hooks go in when the host imports
``flashinfer.jit.core`` (``import flashinfer`` does).
"""

from jitwatch.backends.flashinfer.backend import FlashInferBackend

__all__ = ["FlashInferBackend"]
