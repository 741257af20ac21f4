#!/usr/bin/env bash
# Install Debian's Redis server (7.0 on bookworm) into a git-ignored folder without starting a
# daemon: `apt-get download` + `dpkg-deb -x` of redis-tools (the server binary; redis-server is a
# symlink to redis-check-rdb) and the two libraries it links that a slim image lacks (libjemalloc2,
# liblzf1). No dpkg maintainer script runs, no service is enabled.
#
# Usage: scripts/install-redis.sh [DEST]   (default: <repo>/.tools/redis)
# Afterwards: DEST/bin/redis-server and DEST/bin/redis-cli (wrappers that set LD_LIBRARY_PATH).
# The fleet tests look there and on PATH; each test starts its own server on a free 127.0.0.1
# port with a temporary directory and stops it. Idempotent.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="${1:-$repo/.tools/redis}"

if [ -x "$dest/bin/redis-server" ] && "$dest/bin/redis-server" --version >/dev/null 2>&1; then
  echo "redis-server already installed: $("$dest/bin/redis-server" --version 2>&1 | head -1)"
  exit 0
fi

mkdir -p "$dest/root" "$dest/bin"
work="$(mktemp -d)"
chmod 0755 "$work"
chown _apt "$work" 2>/dev/null || true  # apt-get download fetches as the _apt user
trap 'rm -rf "$work"' EXIT

if ! apt-cache policy redis-tools 2>/dev/null | grep -q 'Candidate: [0-9]'; then
  apt-get update -qq
fi
(cd "$work" && apt-get download -qq redis-tools libjemalloc2 liblzf1)
for deb in "$work"/*.deb; do
  dpkg-deb -x "$deb" "$dest/root"
done
ln -sf redis-check-rdb "$dest/root/usr/bin/redis-server"  # what Debian's redis-server package holds
libdir="$(dirname "$(find "$dest/root" -name 'liblzf.so*' | head -1)")"
for tool in redis-server redis-cli; do
  cat >"$dest/bin/$tool" <<WRAP
#!/bin/sh
# Debian's $tool (unpacked by scripts/install-redis.sh), with its libraries from this folder.
LD_LIBRARY_PATH="$libdir\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}" exec "$dest/root/usr/bin/$tool" "\$@"
WRAP
  chmod 0755 "$dest/bin/$tool"
done
"$dest/bin/redis-server" --version 2>&1 | head -1
