"""A ``@triton.jit`` kernel by module and qualified name, imported under an allow-list.

How manifests (replay, source hashes) and coverage (exact argument flags) reach a kernel: by
import name only (``importlib.import_module``), only when the module is already imported or under
an allowed prefix, and never through ``exec``, ``eval`` or a file path.
"""

from __future__ import annotations

import importlib
import inspect
import re
import sys
from collections.abc import Sequence
from typing import Any

from jitwatch.config import JITWATCH_MANIFEST_ALLOW
from jitwatch.errors import KernelNotResolved

_IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
DOTTED_NAME = re.compile(rf"^{_IDENT}(?:\.{_IDENT})*\Z")
"""What a module name or qualified name must look like: dotted Python identifiers, nothing else
(``\\Z``, not ``$``: ``$`` matches before a trailing newline)."""


def module_allowed(module: str, allow: Sequence[str] | None) -> bool:
    """May replay import ``module``? Already-imported modules always may; others only under a prefix.

    ``allow`` entries are module names or prefixes: ``"vllm"`` allows ``vllm`` and ``vllm.x.y`` but
    not ``vllm_evil``. ``None`` or empty: nothing new is imported.
    """
    if not DOTTED_NAME.match(module):
        return False
    if module in sys.modules:
        return True
    for prefix in allow or ():
        prefix = prefix.strip().rstrip(".")
        if prefix and (module == prefix or module.startswith(prefix + ".")):
            return True
    return False


def resolve_kernel(module: str, qualname: str, *, allow: Sequence[str] | None) -> Any:
    """The ``JITFunction`` named ``module`` + ``qualname``, imported by name under the allow-list.

    Raises:
        KernelNotResolved: bad name, module not allowed, import error, missing attribute, or
            the object is not a ``@triton.jit`` kernel. Nothing is imported when not allowed.
    """
    if not DOTTED_NAME.match(module) or not DOTTED_NAME.match(qualname):
        raise KernelNotResolved(f"{module}:{qualname}: not a dotted Python name")
    if not module_allowed(module, allow):
        raise KernelNotResolved(
            f"module {module!r} is not imported and not under an allowed prefix "
            f"(allow={list(allow or [])}; set {JITWATCH_MANIFEST_ALLOW} or pass --allow)"
        )
    try:
        mod = sys.modules.get(module) or importlib.import_module(module)
    except Exception as exc:  # noqa: BLE001 - any import-time failure is a skip reason
        hint = (
            " (is it on sys.path? the `jitwatch` command does not add the current directory: set PYTHONPATH)"
            if isinstance(exc, ModuleNotFoundError)
            else ""
        )
        raise KernelNotResolved(f"cannot import {module!r}: {type(exc).__name__}: {exc}{hint}") from None
    obj: Any = mod
    for part in qualname.split("."):
        try:
            # getattr_static: no module __getattr__ (lazy submodule imports), no properties run.
            obj = inspect.getattr_static(obj, part)
        except AttributeError:
            raise KernelNotResolved(f"{module!r} has no attribute {qualname!r}") from None
    from triton.runtime.jit import JITFunction

    for _ in range(8):  # Autotuner / Heuristics wrap the JITFunction in .fn
        if isinstance(obj, JITFunction):
            return obj
        try:
            obj = inspect.getattr_static(obj, "fn")
        except AttributeError:
            obj = None
        if obj is None:
            break
    raise KernelNotResolved(f"{module}.{qualname} is not a @triton.jit kernel")


__all__ = ["DOTTED_NAME", "KernelNotResolved", "module_allowed", "resolve_kernel"]
