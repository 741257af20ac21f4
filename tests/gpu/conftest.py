"""GPU tier: real launches on a CUDA device (run through the device tool, ``scripts/gpu-tier.sh``).

Every test here is marked ``gpu`` and skipped when torch sees no CUDA device, so the default
``pytest -m "not gpu"`` run and a plain run on a CPU machine both pass over them.
"""

from __future__ import annotations

import pytest


def _cuda() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:  # noqa: BLE001 - a broken torch install means no GPU tier
        return False


HAS_CUDA = _cuda()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip = pytest.mark.skip(reason="needs a CUDA GPU (run scripts/gpu-tier.sh through the device tool)")
    for item in items:
        if "tests/gpu/" in item.nodeid.replace("\\", "/"):
            item.add_marker(pytest.mark.gpu)
            if not HAS_CUDA:
                item.add_marker(skip)
