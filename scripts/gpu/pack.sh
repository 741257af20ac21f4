#!/usr/bin/env bash
# Split a library's wheels (.whl/LIBRARY/ plus .whl/base/: pydantic & co, which the GPU machine
# lacks) into .gpu/LIBRARY-1 and .gpu/LIBRARY-2, each under 50 MiB, for two device calls
# (scripts/gpu/dsl-common.sh). Wheels over 45 MiB are split with `split -b 45M` into .part-aa/-ab.
set -euo pipefail
cd "$(dirname "$0")/../.."
lib=$1
rm -rf ".gpu/$lib-1" ".gpu/$lib-2"; mkdir -p ".gpu/$lib-1" ".gpu/$lib-2"
n=1
for w in .whl/base/*.whl .whl/"$lib"/*.whl; do
  size=$(stat -c %s "$w")
  if [ "$size" -gt $((45 * 1024 * 1024)) ]; then
    split -b 45M "$w" ".gpu/$lib-1/$(basename "$w").part-"
    mv ".gpu/$lib-1/$(basename "$w").part-ab" ".gpu/$lib-2/"
    [ ! -e ".gpu/$lib-1/$(basename "$w").part-ac" ] || { echo "$w needs 3 parts"; exit 1; }
  else
    # fill part 2 first with small wheels (part 1 carries the first half of the big one)
    cur=$(du -sb ".gpu/$lib-$n" | cut -f1)
    [ $((cur + size)) -lt $((49 * 1024 * 1024)) ] || n=$((3 - n))
    cp "$w" ".gpu/$lib-$n/"
  fi
done
du -sh .gpu/"$lib"-*
