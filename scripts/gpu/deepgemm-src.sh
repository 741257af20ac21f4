#!/usr/bin/env bash
# Make .whl/deepgemm-src/dg-src.tar.gz (DeepGEMM source + the CUTLASS and fmt headers it pins) from
# git mirrors: DG=<DeepGEMM repo> CUTLASS=<cutlass repo> FMT=<fmt repo> bash scripts/gpu/deepgemm-src.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d); mkdir -p "$tmp/dg/third-party/cutlass" "$tmp/dg/third-party/fmt" .whl/deepgemm-src
git -C "$DG" archive "${DG_REV:-54e2261}" csrc deep_gemm scripts setup.py | tar x -C "$tmp/dg"
git -C "$CUTLASS" archive f3fde58372d33e9a5650ba7b80fc48b3b49d40c8 include | tar x -C "$tmp/dg/third-party/cutlass"
git -C "$FMT" archive 553ec11ec06fbe0beebfbb45f9dc3c9eabd83d28 include | tar x -C "$tmp/dg/third-party/fmt"
tar czf .whl/deepgemm-src/dg-src.tar.gz -C "$tmp" dg && rm -rf "$tmp"
ls -la .whl/deepgemm-src/
