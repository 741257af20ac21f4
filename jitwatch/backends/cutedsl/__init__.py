"""CuTeDSL backend (``nvidia-cutlass-dsl``): see :mod:`jitwatch.backends.cutedsl.backend`.

Importing this package imports nothing of CuTeDSL: the hooks go in when the host imports
``cutlass.cute`` (which ``import cutlass`` does; by then ``cutlass.base_dsl.compile_backend`` is
loaded too).
"""

from jitwatch.backends.cutedsl.backend import CuteDSLBackend

__all__ = ["CuteDSLBackend"]
