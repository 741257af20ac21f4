#!/usr/bin/env bash
# Install Debian's Prometheus (promtool + prometheus, 2.42 on bookworm) into a git-ignored folder
# without starting a daemon: `apt-get download` + `dpkg-deb -x`, no dpkg maintainer scripts run.
#
# Usage: scripts/install-prometheus.sh [DEST]   (default: <repo>/.tools/prometheus)
# Afterwards: DEST/usr/bin/promtool and DEST/usr/bin/prometheus. The tests look there and on PATH.
# Idempotent: does nothing if DEST/usr/bin/promtool already runs.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="${1:-$repo/.tools/prometheus}"

if [ -x "$dest/usr/bin/promtool" ] && "$dest/usr/bin/promtool" --version >/dev/null 2>&1; then
  echo "promtool already installed: $("$dest/usr/bin/promtool" --version 2>&1 | head -1)"
  exit 0
fi

mkdir -p "$dest"
work="$(mktemp -d)"
chmod 0755 "$work"
chown _apt "$work" 2>/dev/null || true  # apt-get download fetches as the _apt user
trap 'rm -rf "$work"' EXIT

if ! apt-cache policy prometheus 2>/dev/null | grep -q 'Candidate: [0-9]'; then
  apt-get update -qq
fi
(cd "$work" && apt-get download -qq prometheus)
deb="$(ls "$work"/prometheus_*.deb)"
dpkg-deb -x "$deb" "$dest"
"$dest/usr/bin/promtool" --version 2>&1 | head -1
"$dest/usr/bin/prometheus" --version 2>&1 | head -1
