#!/usr/bin/env bash
# CuTeDSL on the GPU machine in two device calls (its CUDA-13 libs wheel is 88 MiB); see dsl-common.sh.
#   bash scripts/gpu/cutedsl.sh stage 1     # carry .gpu/cutedsl-1
#   bash scripts/gpu/cutedsl.sh run 2       # carry .gpu/cutedsl-2: installs, runs the cutedsl GPU test
cd "$(dirname "$0")/../.."
source scripts/gpu/dsl-common.sh
case "$1" in
  stage) stage_part cutedsl "$2" ;;
  run) stage_part cutedsl "$2"; install_wheels; run_test cutedsl 300 ;;
esac
