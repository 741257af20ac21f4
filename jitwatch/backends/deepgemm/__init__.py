"""DeepGEMM JIT backend: see :mod:`jitwatch.backends.deepgemm.backend`.

Importing this package imports nothing of DeepGEMM: the cache watcher starts when the host
imports ``deep_gemm``.
"""

from jitwatch.backends.deepgemm.backend import DeepGemmBackend

__all__ = ["DeepGemmBackend"]
