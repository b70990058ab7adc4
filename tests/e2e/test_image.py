"""The container image (`make image`: deploy/image/build.py) under podman, as a user runs it.

The image is built (or found in `.cache/image/`), loaded from its docker-archive and started
with a read-only root, the host's network and a mounted config whose first provider is a
refused port and whose second is the loopback fake of `tests/fakes/upstream.py`: a chat request fails
over and gets the fake's answer, the image's HEALTHCHECK passes, and `podman stop` (SIGTERM)
ends it cleanly. Only 127.0.0.1 is used.

podman runs with `--runtime runc` and a containers.conf of its own (`default_ulimits = []`,
through CONTAINERS_CONF: crun fails on this machine's cgroups, and the test touches no system
file). Where podman cannot run a container at all, the tests skip with podman's reason; a
failing build or a broken image fails them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from agent_reach.net.ports import free_port
from agent_reach.version import PROTOCOL_VERSION, __version__

from ..fakes.upstream import Upstream, proxy_config, refused_url

pytestmark = pytest.mark.container


ROOT = Path(__file__).parents[2]
BUILD = ROOT / "deploy" / "image" / "build.py"
MSG = [{"role": "user", "content": "hi"}]
RUNTIME = ["--runtime", "runc", "--health-interval", "disable"]  # no systemd timers here


@dataclass(frozen=True)
class Image:
    summary: dict[str, Any]
    env: dict[str, str]  # podman's environment (its own containers.conf)

    @property
    def ref(self) -> str:
        return str(self.summary["reference"])

    @property
    def id(self) -> str:
        """What podman calls the image: its config's digest."""
        return str(self.summary["config_digest"]).removeprefix("sha256:")

    def podman(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["podman", *args],
            capture_output=True,
            text=True,
            env=self.env,
            timeout=timeout,
            check=False,
        )

    def inspect(self, *args: str) -> Any:
        result = self.podman(*args)
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)


def _build() -> dict[str, Any]:
    argv = [sys.executable, str(BUILD), "--json"]
    if os.geteuid() != 0:
        if (
            not shutil.which("sudo")
            or subprocess.run(["sudo", "-n", "true"], check=False).returncode
        ):
            pytest.skip(
                "building the image needs root (mmdebstrap, chroot) or sudo without a password"
            )
        argv = ["sudo", "-n", *argv]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=1200, check=False)
    assert result.returncode == 0, result.stderr[-4000:]
    return dict(json.loads(result.stdout))


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Image]:
    if shutil.which("podman") is None:
        pytest.skip("podman is not installed (scripts/ensure-services.sh installs it)")
    conf = tmp_path_factory.mktemp("podman") / "containers.conf"
    conf.write_text("[containers]\ndefault_ulimits = []\n")
    env = {**os.environ, "CONTAINERS_CONF": str(conf)}
    img = Image(_build(), env)

    loaded = img.podman("load", "--quiet", "--input", str(img.summary["docker_archive"]))
    assert loaded.returncode == 0, loaded.stderr
    assert loaded.stdout.strip() == f"Loaded image: {img.ref}", loaded.stdout
    img.inspect("image", "inspect", img.id)  # fails unless the archive held this very build
    try:
        probe = img.podman(
            "run", "--rm", *RUNTIME, "--network", "none", "--entrypoint", "/usr/bin/true", img.id
        )
        if probe.returncode != 0:
            pytest.skip(f"podman cannot run containers here: {probe.stderr.strip()[-500:]}")
        yield img
    finally:
        # The loaded image goes with the tests (181 MB a run otherwise stays in podman's store);
        # by ID, as another checkout's may share the tag. One that a container still uses stays.
        img.podman("rmi", img.id)


def test_the_image_is_small_labelled_and_runs_as_a_user(
    image: Image, capsys: pytest.CaptureFixture[str]
) -> None:
    summary = image.summary
    with capsys.disabled():
        print(
            f"\n{image.ref}: {summary['compressed_bytes'] / 1e6:.1f} MB compressed, "
            f"{summary['uncompressed_bytes'] / 1e6:.1f} MB uncompressed "
            f"(build {summary['seconds']['total']} s)"
        )
    assert summary["compressed_bytes"] < 120_000_000
    ((info,),) = [image.inspect("image", "inspect", image.id)]
    config = info["Config"]
    labels = info["Labels"]
    assert labels["org.opencontainers.image.version"] == __version__
    assert labels["org.opencontainers.image.source"].startswith("https://")
    assert labels["org.opencontainers.image.licenses"] == "MIT"
    assert config["User"] == "10001:10001"
    assert config["Entrypoint"][:2] == ["/opt/agent-reach/bin/agent-reach", "serve"]
    assert "AGENT_REACH_CONFIG=/etc/agent-reach/config.yaml" in config["Env"]
    assert info["Healthcheck"]["Test"][0] == "CMD"  # exec form: no shell needed

    version = image.podman(
        "run", "--rm", *RUNTIME, "--network", "none",
        "--entrypoint", "/opt/agent-reach/bin/agent-reach", image.id, "--version",
    )  # fmt: skip
    assert version.returncode == 0, version.stderr
    assert version.stdout.strip() == f"agent-reach {__version__} (protocol {PROTOCOL_VERSION})"


def _get(url: str, timeout: float = 2) -> int:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def _wait_healthy(image: Image, name: str, base: str, deadline_s: float = 90) -> None:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        try:
            if _get(base + "/healthz") == 200:
                return
        except OSError:
            pass
        state = image.podman("inspect", "--format", "{{.State.Status}}", name).stdout.strip()
        if state not in {"running", "created", "configured", ""}:
            break
        time.sleep(0.2)
    logs = image.podman("logs", name)
    pytest.fail(
        f"the container never answered /healthz: {logs.stdout[-2000:]}{logs.stderr[-2000:]}"
    )


def test_it_fails_over_to_the_loopback_fake_and_stops_on_sigterm(
    image: Image, up: Upstream, tmp_path: Path
) -> None:
    config = proxy_config(
        [{"name": "dead", "endpoint": refused_url()}, up.provider("ok")],
        fallback_order=["dead", "ok"],
    )
    del config["state"]  # the default: SQLite in the user's HOME, the image's volume
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o644)  # read by the image's user (uid 10001)
    port = free_port()
    name = f"agent-reach-test-{os.getpid()}-{port}"
    run = image.podman(
        "run", "--detach", "--name", name, *RUNTIME,
        "--network", "host", "--read-only",
        "--volume", f"{path}:/etc/agent-reach/config.yaml:ro",
        "--env", "PROVIDER_KEY=sk-test-provider",
        image.id, "--host", "127.0.0.1", "--port", str(port),
    )  # fmt: skip
    try:
        assert run.returncode == 0, run.stderr
        base = f"http://127.0.0.1:{port}"
        _wait_healthy(image, name, base)

        req = urllib.request.Request(
            base + "/v1/chat/completions",
            data=json.dumps({"model": "m", "messages": MSG}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=30) as resp:
            body = json.loads(resp.read())
            provider = resp.headers["X-Agent-Reach-Provider"]
            trace = resp.headers["X-Agent-Reach-Trace"].split(",")
        assert body["choices"][0]["message"]["content"] == "hello from ok"
        assert provider == "ok"
        assert trace[0].startswith("dead:connect_failed:")
        assert trace[1].startswith("ok:ok:")
        assert [r.scenario for r in up.received] == ["ok"]

        health = image.podman("healthcheck", "run", name)
        assert health.returncode == 0, (health.stdout, health.stderr)

        started = time.monotonic()
        stop = image.podman("stop", "--time", "30", name, timeout=60)
        took = time.monotonic() - started
        assert stop.returncode == 0, stop.stderr
        state = image.inspect("inspect", "--format", "{{json .State}}", name)
        assert state["ExitCode"] == 0, state  # SIGTERM handled, not a kill after the timeout
        assert took < 25, took
        logs = image.podman("logs", name)
        assert "/v1/chat/completions" in logs.stdout + logs.stderr
    finally:
        image.podman("rm", "--force", "--volumes", name)
