#!/usr/bin/env bash
# FlashInfer on the GPU machine in two device calls (flashinfer-python 59 MiB); see dsl-common.sh.
#   bash scripts/gpu/pack.sh flashinfer      # here: .gpu/flashinfer-1, -2 from .whl/flashinfer + .whl/base
#   bash scripts/gpu/flashinfer.sh stage 1   # carry .gpu/flashinfer-1
#   bash scripts/gpu/flashinfer.sh run 2     # carry .gpu/flashinfer-2: installs, runs the flashinfer GPU test
cd "$(dirname "$0")/../.."
source scripts/gpu/dsl-common.sh
case "$1" in
  stage) stage_part flashinfer "$2" ;;
  run) stage_part flashinfer "$2"; install_wheels; run_test flashinfer 500 ;;
esac
