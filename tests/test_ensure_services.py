"""`scripts/ensure-services.sh` (run by `make test`) waits for the dpkg lock instead of failing
when another apt is running. The script runs as a subprocess against a stand-in `apt-get` that
behaves like a busy one: without a lock timeout it fails at once, as the real one does."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).parents[1] / "scripts" / "ensure-services.sh"
CONTAINER_TOOLS = "mmdebstrap skopeo podman runc uidmap fuse-overlayfs slirp4netns"

BUSY_APT = """#!/bin/bash
echo "$*" >> "{log}"
for arg in "$@"; do
  [ "$arg" = "DPkg::Lock::Timeout=300" ] && exit 0   # waits for the lock, then works
done
echo "E: Could not get lock /var/lib/dpkg/lock-frontend. It is held by process 4242 (apt-get)" >&2
exit 100
"""


def _tool(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(0o755)


def run_script(
    tmp_path: Path, uid: int, *args: str
) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "apt-get.log"
    _tool(bin_dir / "apt-get", BUSY_APT.format(log=log))
    _tool(bin_dir / "id", f"#!/bin/bash\necho {uid}\n")
    _tool(bin_dir / "sudo", '#!/bin/bash\nexec "$@"\n')
    # Only the stand-ins on PATH: redis-server, chromium, a Chinese font (no fc-list) and the
    # container tools look missing.
    env = {"PATH": str(bin_dir), "HOME": str(tmp_path)}
    bash = next(p for p in ("/bin/bash", "/usr/bin/bash") if os.path.exists(p))
    result = subprocess.run(
        [bash, str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=30, check=False
    )
    calls = log.read_text().splitlines() if log.exists() else []
    return result, calls


def test_apt_waits_for_the_dpkg_lock(tmp_path: Path) -> None:
    result, calls = run_script(tmp_path, uid=0)
    assert result.returncode == 0, result.stderr
    wanted = f"redis-server chromium fonts-wqy-microhei {CONTAINER_TOOLS}"
    assert f"installing {wanted} for the tests" in result.stderr
    assert calls == [
        "-o DPkg::Lock::Timeout=300 update -q",
        f"-o DPkg::Lock::Timeout=300 install -y -q --no-install-recommends {wanted}",
        "-o DPkg::Lock::Timeout=300 clean",  # the downloaded packages go: a full disk failed CI
    ]


def test_apt_waits_for_the_lock_through_sudo_too(tmp_path: Path) -> None:
    result, calls = run_script(tmp_path, uid=1000)
    assert result.returncode == 0, result.stderr
    assert all(call.startswith("-o DPkg::Lock::Timeout=300 ") for call in calls)
    assert len(calls) == 3


def test_image_installs_only_the_container_tools(tmp_path: Path) -> None:
    result, calls = run_script(tmp_path, 0, "image")
    assert result.returncode == 0, result.stderr
    assert calls[-2].endswith(f"--no-install-recommends {CONTAINER_TOOLS}")
