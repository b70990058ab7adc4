#!/usr/bin/env python3
"""Build the agent-reach container image from Debian packages and PyPI only (`make image`).

Theory of operation. The image has two layers, each built once for its inputs and kept under
`.cache/image/` (gitignored):

1. **base**: `mmdebstrap` makes a Debian bookworm rootfs (variant `essential`, plus `python3` and
   `ca-certificates`; no apt, no man pages or locales), with an empty venv at
   `/opt/agent-reach`, the user `agent-reach` (uid and gid 10001), `/etc/agent-reach` for the
   config and `/var/lib/agent-reach` (the user's HOME, where the default SQLite state goes). The
   .debs are kept for the next build; the layer is rebuilt weekly (security updates) or with
   `--refresh`.
2. **app**: the wheel (`python -m build`, or `--wheel`) with its `redis` and `otel` extras. Their
   wheels are resolved by the base's own Python 3.11.2 (so environment markers match the image,
   not this machine) through this machine's pip settings, then installed with pip inside a
   chroot of the base (`--no-index`: nothing is fetched there), bytecode compiled
   (unchecked-hash: valid on a read-only root), with `healthcheck.py` beside the venv.

Then the OCI layout is written here (index, manifest, config: three JSON files and the two
layers). Writing it ourselves, rather than with umoci, lets the config carry `Healthcheck`,
which the OCI image spec has no field for and Docker and podman read from the config. skopeo
exports it as an OCI archive and a `docker-archive` (`podman load` / `docker load`), both in
`dist/`. The summary says the sizes; `--json` prints it as one JSON object on stdout.

Needs root (mmdebstrap and chroot) and the Debian packages `scripts/ensure-services.sh image`
installs.
"""

from __future__ import annotations

import argparse
import contextlib
import email.parser
import fcntl
import gzip
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
NAME = "agent-reach"  # the image's name (the command's), as `docker-archive` and podman tag it
DIST = "agent-reach-router"  # the Python distribution
EXTRAS = "redis,otel"
SUITE = "bookworm"
VENV = "/opt/agent-reach"
UID = GID = 10001
HOME = "/var/lib/agent-reach"
CONFIG = "/etc/agent-reach/config.yaml"
PORT = 8000
TARGET_COMPRESSED = 120_000_000  # bytes: the target for the compressed image
SOURCE = "https://pypi.org/project/agent-reach-router/"  # where the source is once published
PIP = "pip"  # the installer's own wheel, from PyPI

# Everything that makes the base layer: its cache key is a digest of these lines.
MMDEBSTRAP = [
    "--variant=essential",
    "--include=python3,ca-certificates",
    # merged /usr by symlinks, as debootstrap does, instead of the usrmerge package (and its Perl)
    "--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr",
    "--skip=output/dev",  # the runtime mounts /dev
    "--skip=essential/unlink",  # keep the essential .debs for the cache below
    *(
        f"--dpkgopt=path-exclude=/usr/share/{d}/*"
        for d in ("man", "info", "locale", "doc", "lintian", "bash-completion")
    ),
    "--dpkgopt=path-include=/usr/share/doc/*/copyright",  # licences travel with the binaries
]
CUSTOMIZE = f"""set -e
chroot "$1" python3 -m venv --without-pip {VENV}
rm -f "$1{VENV}"/bin/activate* "$1{VENV}"/bin/Activate.ps1
echo 'agent-reach:x:{UID}:{GID}:agent-reach:{HOME}:/usr/sbin/nologin' >> "$1/etc/passwd"
echo 'agent-reach:x:{GID}:' >> "$1/etc/group"
mkdir -p "$1/etc/agent-reach" "$1{HOME}"
chown {UID}:{GID} "$1{HOME}"
chmod 0750 "$1{HOME}"
rm -rf "$1"/var/cache/debconf/*-old "$1"/var/lib/dpkg/*-old "$1"/var/log/*
"""
HEALTHCHECK = {
    "Test": ["CMD", f"{VENV}/bin/python", "-I", f"{VENV}/healthcheck.py"],
    "Interval": 10_000_000_000,  # nanoseconds, as Docker's config has them
    "Timeout": 5_000_000_000,
    "StartPeriod": 10_000_000_000,
    "Retries": 3,
}


@dataclass(frozen=True)
class Layer:
    """A layer as the OCI layout needs it: the gzipped tar and the digests of both forms."""

    path: Path  # the .tar.gz
    digest: str  # sha256 of the .tar.gz
    diff_id: str  # sha256 of the tar
    size: int  # bytes of the .tar.gz
    tar_size: int  # bytes of the tar
    created_by: str

    def save(self) -> None:
        record = {**asdict(self), "path": self.path.name}
        self.path.with_suffix(".json").write_text(json.dumps(record, indent=1))

    @classmethod
    def load(cls, path: Path) -> Layer | None:
        meta = path.with_suffix(".json")
        if not (path.exists() and meta.exists()):
            return None
        record = json.loads(meta.read_text())
        return cls(**{**record, "path": path})


@dataclass
class Timer:
    seconds: dict[str, float]

    @contextlib.contextmanager
    def step(self, name: str) -> Iterator[None]:
        start = time.monotonic()
        yield
        self.seconds[name] = round(time.monotonic() - start, 1)


def say(text: str) -> None:
    print(f"image: {text}", file=sys.stderr, flush=True)


def run(*args: str | Path, env: dict[str, str] | None = None) -> str:
    argv = [str(a) for a in args]
    result = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    if result.returncode != 0:
        sys.exit(
            f"image: {' '.join(argv[:4])} … failed ({result.returncode}):\n"
            f"{result.stdout[-3000:]}{result.stderr[-3000:]}"
        )
    return str(result.stdout)


def digest_of(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def gzip_layer(tar: Path, out: Path, created_by: str) -> Layer:
    """`tar` compressed to `out` (gzip without a timestamp, so the bytes repeat), with digests."""
    raw, packed = hashlib.sha256(), hashlib.sha256()
    tmp = out.with_suffix(".part")
    with (
        tar.open("rb") as src,
        tmp.open("wb") as dst,
        gzip.GzipFile(fileobj=dst, mode="wb", compresslevel=6, mtime=0, filename="") as gz,
    ):
        while chunk := src.read(1 << 20):
            raw.update(chunk)
            gz.write(chunk)
    with tmp.open("rb") as f:
        while chunk := f.read(1 << 20):
            packed.update(chunk)
    tmp.rename(out)
    layer = Layer(
        out,
        "sha256:" + packed.hexdigest(),
        "sha256:" + raw.hexdigest(),
        out.stat().st_size,
        tar.stat().st_size,
        created_by,
    )
    layer.save()
    return layer


# -- the base layer ---------------------------------------------------------------------------


def base_key(refresh_tag: str) -> str:
    return digest_of("\n".join([SUITE, *MMDEBSTRAP, CUSTOMIZE, refresh_tag]))[:16]


def build_base(cache: Path, key: str) -> Layer:
    debs = cache / "debs"
    debs.mkdir(parents=True, exist_ok=True)
    tar = cache / f"base-{key}.tar"
    script = cache / "customize.sh"
    script.write_text(CUSTOMIZE)
    say(f"base: mmdebstrap {SUITE} (python3, ca-certificates) …")
    run(
        "mmdebstrap",
        "--quiet",
        *MMDEBSTRAP,
        '--setup-hook=mkdir -p "$1/var/cache/apt/archives"',
        f"--setup-hook=sync-in {debs} /var/cache/apt/archives/",
        f"--customize-hook=sync-out /var/cache/apt/archives {debs}",
        f'--customize-hook=sh {script} "$1"',
        SUITE,
        tar,
    )
    created_by = f"mmdebstrap {' '.join(MMDEBSTRAP[:2])} {SUITE} (deploy/image/build.py)"
    layer = gzip_layer(tar, cache / f"base-{key}.tar.gz", created_by)
    tar.unlink()
    return layer


# -- the app layer ----------------------------------------------------------------------------


def wheel_metadata(wheel: Path) -> dict[str, str | list[str]]:
    with zipfile.ZipFile(wheel) as zf:
        name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        msg = email.parser.Parser().parsestr(zf.read(name).decode())
    return {
        "Name": str(msg["Name"]),
        "Version": str(msg["Version"]),
        "Summary": str(msg["Summary"]),
        "License": str(msg.get("License-Expression") or msg.get("License") or ""),
        "Requires-Dist": sorted(msg.get_all("Requires-Dist") or []),
    }


def build_wheel(out: Path) -> Path:
    say("wheel: python -m build --wheel …")
    run(sys.executable, "-m", "build", "--wheel", "--outdir", out, ROOT)
    (wheel,) = out.glob("*.whl")
    return wheel


@contextlib.contextmanager
def unpacked(layer: Layer, parent: Path) -> Iterator[Path]:
    """The base layer unpacked as root into a temporary directory (owners kept)."""
    with tempfile.TemporaryDirectory(dir=parent, prefix="rootfs-") as tmp:
        root = Path(tmp) / "root"
        root.mkdir()
        run("tar", "-xzf", layer.path, "-C", root, "--numeric-owner")
        yield root


def pip_wheel(cache: Path, refresh: bool) -> Path:
    found = sorted(cache.glob("pip-*.whl"))
    if found and not refresh:
        return found[-1]
    for old in found:
        old.unlink()
    run(
        sys.executable,
        "-m",
        "pip",
        "download",
        "--quiet",
        "--no-deps",
        "--only-binary=:all:",
        "-d",
        cache,
        PIP,
    )
    return sorted(cache.glob("pip-*.whl"))[-1]


def resolve(house: Path, rootfs: Path, wheel: Path, pip: Path) -> None:
    """`house` filled with the wheels of the distribution and its extras, for the image's Python."""
    shutil.rmtree(house, ignore_errors=True)
    house.mkdir()
    say(f"wheels: {DIST}[{EXTRAS}] and dependencies, resolved by the image's Python …")
    # The image's interpreter, run here (same glibc as Debian bookworm): markers such as
    # python_full_version are its own; pip's settings (index, certificates) are this machine's.
    python = rootfs / "usr" / "bin" / "python3.11"
    run(
        python,
        "-I",
        pip / "pip",
        "download",
        "--quiet",
        "--disable-pip-version-check",
        "--only-binary=:all:",
        "-d",
        house,
        f"{wheel}[{EXTRAS}]",
    )
    (house / ".complete").touch()


def app_tar(stage: Path, tar: Path, epoch: int) -> None:
    """`stage` as a layer: sorted, owned by root, times clamped to `epoch` (bytes that repeat)."""

    def clean(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.gid = 0
        info.uname = info.gname = "root"
        info.mtime = min(int(info.mtime), epoch)
        return info

    with tarfile.open(tar, "w", format=tarfile.PAX_FORMAT) as out:
        for path in sorted(stage.rglob("*")):
            out.add(path, arcname=str(path.relative_to(stage)), recursive=False, filter=clean)


def build_app(
    cache: Path, base: Layer, wheel: Path, house: Path, pip: Path, key: str, epoch: int
) -> Layer:
    say(f"app: pip install {wheel.name}[{EXTRAS}] in a chroot of the base …")
    with unpacked(base, cache) as rootfs:
        inside = rootfs / "tmp" / "build"
        shutil.copytree(house, inside / "wheels")
        shutil.copy2(pip, inside / pip.name)
        stage = inside / "stage"
        env = ["env", "-i", "PATH=/usr/bin:/bin", "HOME=/tmp/build", "LANG=C.UTF-8"]
        python = [f"{VENV}/bin/python", "-I"]
        run(
            "chroot",
            rootfs,
            *env,
            *python,
            f"/tmp/build/{pip.name}/pip",
            "install",
            "--quiet",
            "--no-index",
            "--find-links",
            "/tmp/build/wheels",
            "--root",
            "/tmp/build/stage",
            "--no-compile",
            "--no-cache-dir",
            "--no-warn-script-location",
            "--disable-pip-version-check",
            f"{DIST}[{EXTRAS}]",
        )
        shutil.copy2(HERE / "healthcheck.py", stage / VENV.lstrip("/") / "healthcheck.py")
        run(
            "chroot",
            rootfs,
            *env,
            *python,
            "-m",
            "compileall",
            "-q",
            "-s",
            "/tmp/build/stage",
            "-p",
            "/",
            "--invalidation-mode",
            "unchecked-hash",
            f"/tmp/build/stage{VENV}",
        )
        tar = cache / f"app-{key}.tar"
        app_tar(stage, tar, epoch)
    layer = gzip_layer(tar, cache / f"app-{key}.tar.gz", f"pip install {DIST}[{EXTRAS}]")
    tar.unlink()
    return layer


# -- the image --------------------------------------------------------------------------------


def git(*args: str) -> str:
    result = subprocess.run(["git", *args], capture_output=True, text=True, cwd=ROOT, check=False)
    return result.stdout.strip() if result.returncode == 0 else ""


def architecture() -> str:
    machine = platform.machine()
    return {"x86_64": "amd64", "aarch64": "arm64"}.get(machine, machine)


def blob(layout: Path, data: bytes) -> dict[str, object]:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    (layout / "blobs" / "sha256" / digest[7:]).write_bytes(data)
    return {"digest": digest, "size": len(data)}


def write_layout(
    layout: Path, layers: list[Layer], meta: dict[str, str | list[str]], source: str, epoch: int
) -> tuple[str, str, dict[str, str]]:
    """The OCI image layout at `layout`: (reference tag, config digest, labels)."""
    shutil.rmtree(layout, ignore_errors=True)
    (layout / "blobs" / "sha256").mkdir(parents=True)
    for layer in layers:
        os.link(layer.path, layout / "blobs" / "sha256" / layer.digest[7:])
    version = str(meta["Version"])
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))
    labels = {
        "org.opencontainers.image.title": NAME,
        "org.opencontainers.image.description": str(meta["Summary"]),
        "org.opencontainers.image.version": version,
        "org.opencontainers.image.source": source,
        "org.opencontainers.image.licenses": str(meta["License"]),
        "org.opencontainers.image.created": created,
        "org.opencontainers.image.revision": git("rev-parse", "HEAD"),
        "org.opencontainers.image.base.name": f"debian:{SUITE} (mmdebstrap, not a registry image)",
    }
    config = {
        "created": created,
        "architecture": architecture(),
        "os": "linux",
        "config": {
            "User": f"{UID}:{GID}",
            "ExposedPorts": {f"{PORT}/tcp": {}},
            "Env": [
                f"PATH={VENV}/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                f"HOME={HOME}",
                f"AGENT_REACH_CONFIG={CONFIG}",
                "PYTHONDONTWRITEBYTECODE=1",
                "PYTHONUNBUFFERED=1",
                "LANG=C.UTF-8",
            ],
            # No shell at run time: the console script's #! is the venv's Python.
            "Entrypoint": [
                f"{VENV}/bin/agent-reach",
                "serve",
                "--host",
                "0.0.0.0",
                "--port",
                str(PORT),
            ],
            "WorkingDir": HOME,
            "Volumes": {HOME: {}},
            "Labels": labels,
            "StopSignal": "SIGTERM",
            "Healthcheck": HEALTHCHECK,  # not in the OCI spec: Docker's field, read by podman too
        },
        "rootfs": {"type": "layers", "diff_ids": [layer.diff_id for layer in layers]},
        "history": [{"created": created, "created_by": layer.created_by} for layer in layers],
    }
    config_desc = blob(layout, json.dumps(config, indent=1).encode())
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", **config_desc},
        "layers": [
            {
                "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                "digest": layer.digest,
                "size": layer.size,
            }
            for layer in layers
        ],
        "annotations": labels,
    }
    manifest_desc = blob(layout, json.dumps(manifest, indent=1).encode())
    index = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [
            {
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                **manifest_desc,
                "annotations": {"org.opencontainers.image.ref.name": version},
            }
        ],
    }
    (layout / "index.json").write_text(json.dumps(index, indent=1))
    (layout / "oci-layout").write_text(json.dumps({"imageLayoutVersion": "1.0.0"}))
    return version, str(config_desc["digest"]), labels


def export(layout: Path, tag: str, out: Path) -> tuple[Path, Path]:
    """The layout as an OCI archive and a docker-archive (`podman load`, `docker load`)."""
    out.mkdir(parents=True, exist_ok=True)
    oci = out / f"{NAME}-{tag}.oci.tar"
    docker = out / f"{NAME}-{tag}.docker.tar"
    for path in (oci, docker):
        path.unlink(missing_ok=True)
    src = f"oci:{layout}:{tag}"
    run("skopeo", "copy", "--quiet", src, f"oci-archive:{oci}:localhost/{NAME}:{tag}")
    run("skopeo", "copy", "--quiet", src, f"docker-archive:{docker}:localhost/{NAME}:{tag}")
    return oci, docker


def prune(cache: Path, keep: set[str]) -> None:
    """Drop the layers and wheel sets of older builds (`keep`: the names, less suffixes)."""
    for path in [*cache.glob("base-*"), *cache.glob("app-*"), *cache.glob("wheels-*")]:
        if path.name.split(".")[0] in keep:
            continue
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)


def mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


def layers_for(args: argparse.Namespace, cache: Path, timer: Timer) -> dict[str, Any]:
    """Both layers (built or found in `cache`), the layout and the archives: the summary."""
    epoch = int(os.environ.get("SOURCE_DATE_EPOCH") or git("log", "-1", "--format=%ct") or 0)
    epoch = epoch or int(time.time())
    key = base_key(time.strftime("%G-W%V"))  # a new base each week: security updates
    base = None if args.refresh else Layer.load(cache / f"base-{key}.tar.gz")
    with timer.step("base"):
        if base is None:
            base = build_base(cache, key)
    with tempfile.TemporaryDirectory(dir=cache, prefix="wheel-") as tmp:
        with timer.step("wheel"):
            wheel = args.wheel.resolve() if args.wheel else build_wheel(Path(tmp))
        meta = wheel_metadata(wheel)
        with timer.step("wheels"):
            pip = pip_wheel(cache, args.refresh)
            deps = json.dumps([key, pip.name, EXTRAS, meta["Requires-Dist"]])
            house = cache / f"wheels-{digest_of(deps)[:16]}"
            if args.refresh or not (house / ".complete").exists():
                with unpacked(base, cache) as rootfs:
                    resolve(house, rootfs, wheel, pip)
            # this build's own wheel, beside the resolved dependencies
            for old in house.glob(f"{DIST.replace('-', '_')}-*.whl"):
                old.unlink()
            shutil.copy2(wheel, house / wheel.name)
        inputs = [
            base.digest,
            hashlib.sha256(wheel.read_bytes()).hexdigest(),
            *sorted(p.name for p in house.glob("*.whl")),
            digest_of((HERE / "healthcheck.py").read_text()),
            digest_of(Path(__file__).read_text()),
        ]
        app_key = digest_of("\n".join(inputs))[:16]
        app = Layer.load(cache / f"app-{app_key}.tar.gz")
        with timer.step("app"):
            if app is None:
                app = build_app(cache, base, wheel, house, pip, app_key, epoch)
    with timer.step("export"):
        layout = cache / "oci"
        tag, config_digest, labels = write_layout(layout, [base, app], meta, args.source, epoch)
        oci, docker = export(layout, tag, args.out.resolve())
    prune(cache, {f"base-{key}", f"app-{app_key}", house.name})
    return {
        "reference": f"localhost/{NAME}:{tag}",
        "config_digest": config_digest,
        "oci_layout": str(layout),
        "oci_archive": str(oci),
        "docker_archive": str(docker),
        "compressed_bytes": base.size + app.size,
        "uncompressed_bytes": base.tar_size + app.tar_size,
        "layers": [
            {"created_by": x.created_by, "compressed": x.size, "uncompressed": x.tar_size}
            for x in (base, app)
        ],
        "labels": labels,
    }


def shown(path: str) -> str:
    return str(Path(path).relative_to(ROOT)) if Path(path).is_relative_to(ROOT) else path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--wheel", type=Path, help="the wheel to install (default: build one)")
    parser.add_argument("--out", type=Path, default=ROOT / "dist", help="where the archives go")
    parser.add_argument("--cache", type=Path, default=ROOT / ".cache" / "image")
    parser.add_argument("--refresh", action="store_true", help="rebuild the base, re-resolve")
    parser.add_argument(
        "--source",
        default=os.environ.get("IMAGE_SOURCE") or SOURCE,
        help="the org.opencontainers.image.source label",
    )
    parser.add_argument("--json", action="store_true", help="the summary as JSON on stdout")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("image: needs root (mmdebstrap and chroot): run it with sudo")
    missing = [t for t in ("mmdebstrap", "skopeo", "chroot", "tar") if not shutil.which(t)]
    if missing:
        sys.exit(f"image: {', '.join(missing)} missing: run scripts/ensure-services.sh image")

    cache: Path = args.cache.resolve()
    cache.mkdir(parents=True, exist_ok=True)
    timer = Timer({})
    started = time.monotonic()
    with (cache / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one build at a time per cache (a test and a person)
        summary = layers_for(args, cache, timer)
    summary["seconds"] = {**timer.seconds, "total": round(time.monotonic() - started, 1)}
    compressed = summary["compressed_bytes"]
    sizes = [mb(x["compressed"]) for x in summary["layers"]]
    say(
        f"{summary['reference']} {summary['config_digest'][:19]}: {mb(compressed)} compressed "
        f"(base {sizes[0]} + app {sizes[1]}), {mb(summary['uncompressed_bytes'])} uncompressed; "
        f"seconds {summary['seconds']}"
    )
    say(f"{shown(summary['oci_archive'])}  (OCI archive)")
    say(f"{shown(summary['docker_archive'])}  (podman load -i / docker load -i)")
    if compressed > TARGET_COMPRESSED:
        say(f"WARNING: over the {mb(TARGET_COMPRESSED)} target")
    if args.json:
        print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
