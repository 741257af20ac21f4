#!/usr/bin/env bash
# Build the DSL test environment (.venv-dsl/site) used by the `dsl` pytest tier (make test-dsl):
# the real CuTeDSL, TileLang and FlashInfer, installed with --target next to .venv (which has torch and jitwatch's
# deps), so the tier reuses .venv's torch instead of downloading another one.
#
# Usage: scripts/make-dsl-env.sh [TARGET_DIR] (default: <repo>/.venv-dsl/site)
# Needs: .venv (make env), network. ~1.1 GB installed (CuTeDSL's CUDA-13 libraries are most of it).
# No GPU and no CUDA toolkit needed: CuTeDSL compiles to a cubin for CUTE_DSL_ARCH itself; TileLang gets
# nvcc, headers and cudart from NVIDIA's wheels (nvidia/cu13 under the target; tests put it on PATH/CUDA_HOME).
# Versions: those checked in docs/backends/<name>.md; --no-deps because their torch/numpy pins would
# replace .venv's, so every runtime dependency is named here.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TARGET="${1:-$REPO/.venv-dsl/site}"
PY="${PYTHON:-$REPO/.venv/bin/python}"
mkdir -p "$TARGET"
PIP_DISABLE_PIP_VERSION_CHECK=1 "$PY" -m pip install -q --no-deps --upgrade --target "$TARGET" \
  nvidia-cutlass-dsl==4.8.1 nvidia-cutlass-dsl-libs-base==4.8.1 nvidia-cutlass-dsl-libs-core==4.8.1 \
  nvidia-cutlass-dsl-libs-cu13==4.8.1 "cuda-bindings>=13,<14" cuda-pathfinder \
  tilelang==0.1.15 apache-tvm-ffi==0.1.12 torch-c-dlpack-ext cloudpickle ml-dtypes psutil tqdm z3-solver==4.15.4.0 \
  flashinfer-python==0.7.2.post1 einops tabulate nvidia-ml-py ninja "cuda-python>=13,<14" \
  "nvidia-cuda-nvcc>=13,<14" "nvidia-cuda-cccl>=13,<14" "nvidia-cuda-runtime>=13,<14" "nvidia-cuda-crt>=13,<14" "nvidia-nvvm>=13,<14"
# FlashInfer links its JIT modules with -L$CUDA_HOME/lib64 -L$CUDA_HOME/lib64/stubs -lcudart -lcuda: give
# the wheel toolkit that layout, and a link-time stand-in for the driver's libcuda.so (no GPU here; with
# --as-needed nothing from it is recorded, so the built module loads without a driver).
CU="$TARGET/nvidia/cu13"
ln -sfn lib "$CU/lib64"
ln -sf libcudart.so.13 "$CU/lib/libcudart.so"
mkdir -p "$CU/lib/stubs"
printf '' | ${CC:-cc} -x c -shared -o "$CU/lib/stubs/libcuda.so" -Wl,-soname,libcuda.so.1 -
PYTHONPATH="$TARGET:$TARGET/nvidia_cutlass_dsl/dsl_packages" "$PY" -c \
  "import cutlass, importlib.metadata as m; print('cutlass-dsl', m.version('nvidia-cutlass-dsl'), 'tilelang', m.version('tilelang'), 'flashinfer', m.version('flashinfer-python'))"
