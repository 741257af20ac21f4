#!/usr/bin/env bash
# Build DeepGEMM (upstream deepseek-ai/DeepGEMM, C++ JIT) against the GPU machine's own torch, since
# no prebuilt DeepGEMM runs there: sgl-deep-gemm 0.2.5's _C.so needs a newer libtorch (undefined
# symbol c10::cuda::CUDAErrorLogCapture, torch::Library::_def(..., torch::headeronly::Tag ...)).
# Source: .whl/deepgemm-src/dg-src.tar.gz = `git archive` of deepseek-ai/DeepGEMM 54e2261 (2.6.1;
# csrc, deep_gemm, setup.py) + NVIDIA/cutlass f3fde58 include/ + fmtlib/fmt 553ec11 include/ (the
# submodule commits DeepGEMM pins), made by scripts/gpu/deepgemm-src.sh. Same flags as its setup.py.
# Result: /tmp/dg-build/dg is an importable deep_gemm (PYTHONPATH=/tmp/dg-build/dg); a prebuilt
# _C.so in .whl/deepgemm-src/ (from an earlier call's $OUT) is used instead of building.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY="${PYTHON:-python3}"
rm -rf /tmp/dg-build && mkdir -p /tmp/dg-build
tar xzf .whl/deepgemm-src/dg-src.tar.gz -C /tmp/dg-build
SRC=/tmp/dg-build/dg
cp -r "$SRC"/third-party/cutlass/include/cute "$SRC"/third-party/cutlass/include/cutlass "$SRC"/deep_gemm/include/
if [ -f .whl/deepgemm-src/_C.so ]; then
  cp .whl/deepgemm-src/_C.so "$SRC/deep_gemm/_C.so"; echo "using prebuilt _C.so"; exit 0
fi
CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}"
cd "$SRC"
MAX_JOBS=16 "$PY" - <<PYEOF
import time
from torch.utils.cpp_extension import load
t = time.perf_counter()
load(name="_C", sources=["csrc/python_api.cpp"],
     extra_include_paths=["$CUDA_HOME/include", "$CUDA_HOME/include/cccl", "deep_gemm/include",
                          "third-party/cutlass/include", "third-party/fmt/include"],
     extra_cflags=["-std=c++17", "-O3", "-fPIC", "-Wno-psabi", "-Wno-deprecated-declarations"],
     extra_ldflags=["-L$CUDA_HOME/lib64", "-lcudart", "-lnvrtc"],
     build_directory="/tmp/dg-build", verbose=False, with_cuda=True)
print(f"built deep_gemm._C in {time.perf_counter() - t:.1f} s")
PYEOF
# The GPU machine's toolchain links libstdc++ statically into the extension (no libstdc++.so NEEDED),
# which gives _C.so its own, uninitialised std::locale: the first std::regex / ostream << in the JIT
# segfaults. Relink against the shared libstdc++ the host process (torch) already uses.
grep -n "static-libstdc\|^ *ldflags" /tmp/dg-build/build.ninja | cut -c1-300 || true
if ! readelf -d /tmp/dg-build/_C.so | grep -q "libstdc++"; then  # no libstdc++.so dev symlink there: g++ falls back to libstdc++.a
  sed -i 's/-static-libstdc++//g; s/-static-libgcc//g; s/^\( *ldflags = .*\)$/\1 -Wl,--no-as-needed -l:libstdc++.so.6/' /tmp/dg-build/build.ninja
  rm -f /tmp/dg-build/_C.so && ninja -C /tmp/dg-build >/dev/null
fi
readelf -d /tmp/dg-build/_C.so | grep NEEDED
cp /tmp/dg-build/_C.so deep_gemm/_C.so
