"""An out-of-tree jitwatch backend for the toy JIT library ``toyjit`` (docs/architecture.md)."""

from __future__ import annotations

import functools
from types import ModuleType
from typing import Any

from jitwatch.backends.base import BackendStatus, Capture, LibraryBackend


class ToyJitBackend(LibraryBackend):
    name = "toyjit"  # the `backend` label
    label = "toyjit kernel"  # for log lines
    module = "toyjit"  # hook in once the host imports this
    distributions = ("toyjit",)

    def hook_in(self, module: ModuleType) -> BackendStatus:
        original, sink = module.compile, self.sink
        assert sink is not None

        @functools.wraps(original)
        def compile(name: str, shape: tuple[int, ...], **kwargs: Any) -> Any:
            if (name, tuple(shape)) in module.CACHE:  # in-memory hit: nothing compiles
                return original(name, shape, **kwargs)
            token = sink.begin(self.name, name)  # phase, request, start time: taken now
            try:
                result = original(name, shape, **kwargs)
            except BaseException:
                sink.cancel(token)
                raise
            sink.finish(token, Capture(self.name, name, key=str(tuple(shape)), detail={"shape": list(shape)}))
            return result

        self._module, self._original = module, original
        module.compile = compile
        return BackendStatus(self.name, "active", self.version(), ("toyjit.compile",))

    def unhook(self) -> None:
        if self._module.compile is not self._original:  # put back what was there
            self._module.compile = self._original
