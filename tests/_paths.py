"""Paths every test module may need (the repository root, the tests directory)."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
TRITON_TESTS = TESTS / "backends" / "triton"
"""Holds ``kernels_fieldcases.py``: kernels importable by the plain module name ``kernels_fieldcases``
(manifests name them so), once this directory is on ``sys.path``."""
