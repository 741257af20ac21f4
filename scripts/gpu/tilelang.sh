#!/usr/bin/env bash
# TileLang on the GPU machine in two device calls (tilelang 50 MB + z3-solver 29 MB); see dsl-common.sh.
#   bash scripts/gpu/tilelang.sh stage 1     # carry .gpu/tilelang-1
#   bash scripts/gpu/tilelang.sh run 2       # carry .gpu/tilelang-2: installs, runs the tilelang GPU test
cd "$(dirname "$0")/../.."
source scripts/gpu/dsl-common.sh
case "$1" in
  stage) stage_part tilelang "$2" ;;
  run) stage_part tilelang "$2"; install_wheels; run_test tilelang 400 ;;
esac
