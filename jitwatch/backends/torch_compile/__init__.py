"""The ``torch_compile`` backend: Dynamo compiles and recompiles with their guard-failure reasons,
Inductor cache loads and CUDA-graph recordings (``docs/backends/torch-compile.md``)."""

from jitwatch.backends.torch_compile.backend import BACKEND, TorchCompileBackend
from jitwatch.backends.torch_compile.reasons import REASON_CLASSES, reason_class

__all__ = ["BACKEND", "REASON_CLASSES", "TorchCompileBackend", "reason_class"]
