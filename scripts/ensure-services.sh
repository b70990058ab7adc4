#!/usr/bin/env bash
# The system programs the tests start themselves: redis-server (shared state) and chromium
# (the HTML report's charts). Installs the missing ones with apt-get (as root, or with sudo).
set -euo pipefail
need=()
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
command -v chromium >/dev/null 2>&1 || need+=(chromium)
[ ${#need[@]} -eq 0 ] && exit 0
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null 2>&1 || { echo "install ${need[*]} (Debian packages) first" >&2; exit 1; }
  sudo="sudo"
fi
echo "installing ${need[*]} for the tests" >&2
export DEBIAN_FRONTEND=noninteractive
# Another apt or dpkg may be running (unattended upgrades, another checkout's `make test`):
# wait up to 5 minutes for its lock instead of failing at once.
wait_lock=(-o DPkg::Lock::Timeout=300)
$sudo apt-get "${wait_lock[@]}" update -q
$sudo apt-get "${wait_lock[@]}" install -y -q --no-install-recommends "${need[@]}"
