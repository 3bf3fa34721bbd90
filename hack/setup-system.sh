#!/usr/bin/env bash
# Installs the Debian packages the tests, the demo and the benchmark need, only when they are missing
# (chromium: headless, for the tests that look at Argo CD's web UI).
set -euo pipefail

need=()
have_pkg() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
for pkg in postgresql redis-server git iproute2 chromium; do
  have_pkg "$pkg" || need+=("$pkg")
done
if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi
echo "==> apt-get install ${need[*]}"
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${need[@]}"
# The Debian packages start system-wide services; the project runs its own private instances instead.
for svc in postgresql redis-server; do
  $sudo systemctl disable --now "$svc" >/dev/null 2>&1 || $sudo service "$svc" stop >/dev/null 2>&1 || true
done
