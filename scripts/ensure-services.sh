#!/usr/bin/env bash
# The system programs the tests start themselves, installed with apt-get when missing (as root,
# or with sudo): redis-server (shared state), chromium (the HTML report's charts, the
# documentation site's screenshots) with a font for Chinese (fonts-wqy-microhei), and the
# container tools (`make image` and tests/e2e/test_image.py: mmdebstrap builds the rootfs,
# skopeo exports the image, podman and runc run it; uidmap, fuse-overlayfs and slirp4netns for
# podman without root). `ensure-services.sh image` installs only the container tools.
set -euo pipefail
group="${1:-all}"
have() { command -v "$1" >/dev/null 2>&1; }
need=()
if [ "$group" = all ]; then
  have redis-server || need+=(redis-server)
  have chromium || need+=(chromium)
  { have fc-list && [ -n "$(fc-list :lang=zh family)" ]; } || need+=(fonts-wqy-microhei)
fi
have mmdebstrap || need+=(mmdebstrap)
have skopeo || need+=(skopeo)
have podman || need+=(podman)
have runc || need+=(runc)
have newuidmap || need+=(uidmap)
have fuse-overlayfs || need+=(fuse-overlayfs)
have slirp4netns || need+=(slirp4netns)

sudo=""
if [ "$(id -u)" -ne 0 ] && { [ ${#need[@]} -gt 0 ] || have podman; }; then
  command -v sudo >/dev/null 2>&1 || { echo "install ${need[*]} (Debian packages) first" >&2; exit 1; }
  sudo="sudo"
fi
if [ ${#need[@]} -gt 0 ]; then
  echo "installing ${need[*]} for the tests" >&2
  export DEBIAN_FRONTEND=noninteractive
  # Another apt or dpkg may be running (unattended upgrades, another checkout's `make test`):
  # wait up to 5 minutes for its lock instead of failing at once.
  wait_lock=(-o DPkg::Lock::Timeout=300)
  $sudo apt-get "${wait_lock[@]}" update -q
  $sudo apt-get "${wait_lock[@]}" install -y -q --no-install-recommends "${need[@]}"
  # the downloaded packages go (hundreds of MB): a full disk once failed a CI run
  $sudo apt-get "${wait_lock[@]}" clean
fi

# podman's default ulimits (nofile) cannot be set in some sandboxes, and crun fails on hybrid
# cgroups: give a machine that has no containers.conf one that works (`podman run --runtime
# runc`). An existing file is left as it is; tests/e2e/test_image.py brings its own.
conf=/etc/containers/containers.conf
if have podman && [ ! -e "$conf" ]; then
  $sudo mkdir -p "$(dirname "$conf")"
  printf '[containers]\ndefault_ulimits = []\n' | $sudo tee "$conf" >/dev/null
  echo "wrote $conf (default_ulimits = [])" >&2
fi
