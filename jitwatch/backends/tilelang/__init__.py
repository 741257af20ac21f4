"""TileLang backend: see :mod:`jitwatch.backends.tilelang.backend`.

Importing this package imports nothing of TileLang (importing TileLang and TVM costs seconds):
the hooks go in when the host imports ``tilelang``.
"""

from jitwatch.backends.tilelang.backend import TileLangBackend

__all__ = ["TileLangBackend"]
