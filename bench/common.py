"""What the benchmarks share: child processes (pinned to a CPU, always stopped), keep-alive
request timing, the wrk load generator and its parser, percentiles, memory and CPU readings,
and the agent-reach builds to measure: this tree's and, with `--before REV`, an older commit's
beside it (`add_before`, `builds`, `side_by_side`).

Every child is started in its own process group and killed with it when the benchmark ends,
fails, is interrupted (Ctrl-C) or terminated (SIGTERM, SIGHUP); on Linux a child is also sent
SIGTERM by the kernel if the benchmark itself dies without cleaning up.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import ctypes
import http.client
import json
import os
import platform
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

HERE = Path(__file__).parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))  # the fake providers: tests/fakes
MOCK = [sys.executable, "-m", "tests.fakes.bench"]

from tests.fakes import shapes  # noqa: E402

RESULTS = HERE / "results"
PATH = "/v1/chat/completions"
REQUEST: dict[str, Any] = {"model": "bench", "messages": [{"role": "user", "content": "ping"}]}
BODY = json.dumps(REQUEST)
AGENT_REACH = str(Path(sys.executable).parent / "agent-reach")


def sse_chunk(text: str | None, finish: str | None, model: str) -> bytes:
    """One `chat.completion.chunk` as an SSE event, the way a simulated provider streams it."""
    delta = {} if text is None else {"content": text}
    return shapes.sse(shapes.chunk(delta, finish, model=model, id=f"chatcmpl-{model}"))


# -- processes --------------------------------------------------------------------------------


def can_pin() -> bool:
    """Two CPUs or more and taskset: the system under test and the load can be kept apart."""
    return bool(shutil.which("taskset")) and (os.cpu_count() or 1) > 1


def pinned(cpu: int | None, cmd: list[str]) -> list[str]:
    """`cmd` run on CPU `cpu` alone (its children inherit it), where pinning is possible."""
    return ["taskset", "-c", str(cpu), *cmd] if cpu is not None and can_pin() else cmd


def pin_self(cpu: int) -> bool:
    """Keep this process (the client side of the measurements) on CPU `cpu`."""
    if not can_pin():
        return False
    os.sched_setaffinity(0, {cpu})
    return True


def _die_with_parent() -> None:
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _exit_on_signal(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


class Processes:
    """The children of one benchmark run; `with Processes() as procs:` stops them all on the
    way out, whatever the way out is."""

    def __init__(self) -> None:
        self.running: list[subprocess.Popen[bytes]] = []

    def __enter__(self) -> Processes:
        for sig in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, _exit_on_signal)
        signal.signal(signal.SIGINT, signal.default_int_handler)  # even if started ignoring it
        atexit.register(self.stop_all)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_all()

    def start(
        self,
        cmd: list[str],
        *,
        cpu: int | None = None,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        log: Path | None = None,
        stdout: int | IO[bytes] | None = None,
    ) -> subprocess.Popen[bytes]:
        """Start `cmd` pinned to `cpu`; its output goes to `log` (or `stdout`, else nowhere)."""
        out: int | IO[bytes] = subprocess.DEVNULL
        if log is not None:
            out = log.open("ab")
        elif stdout is not None:
            out = stdout
        proc = subprocess.Popen(
            pinned(cpu, cmd),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT if log is not None else subprocess.DEVNULL,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            start_new_session=True,
            preexec_fn=_die_with_parent,  # noqa: PLW1509 (no threads here)
        )
        if log is not None:
            out.close()  # type: ignore[union-attr]
        self.running.append(proc)
        return proc

    def stop(self, proc: subprocess.Popen[bytes], timeout: float = 10.0) -> None:
        """SIGTERM to the child's whole process group, SIGKILL after `timeout` seconds."""
        if proc in self.running:
            self.running.remove(proc)
        for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, sig)
            try:
                proc.wait(wait)
            except subprocess.TimeoutExpired:
                continue
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)  # whatever it left behind in its group
            return

    def stop_all(self) -> None:
        for proc in list(reversed(self.running)):
            self.stop(proc)


def start_mock(procs: Processes, cpu: int | None = 1) -> int:
    """The benchmarks' upstream (tests/fakes/bench.py) on `cpu`; its port."""
    proc = procs.start(MOCK, cpu=cpu, cwd=ROOT, stdout=subprocess.PIPE)
    assert proc.stdout is not None
    return int(proc.stdout.readline())


def agent_reach_serve(config: Path, port: int, executable: str = AGENT_REACH) -> list[str]:
    """The command line of `agent-reach serve` with `config` on `port` (this tree's agent-reach,
    or `executable`: a `Build`'s)."""
    return [executable, "--config", str(config), "serve", "--port", str(port)]


def raise_nofile() -> int:
    """Raise this process's soft limit of open files to the hard one (its children inherit
    it); the limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


# -- builds: this tree's agent-reach, and an older commit's beside it ----------------------------


@dataclass(frozen=True)
class Build:
    """One agent-reach to measure: its label in the results and its `agent-reach` program."""

    label: str
    executable: str


THIS_TREE = Build("agent-reach", AGENT_REACH)
BEFORE_ROOT = Path(tempfile.gettempdir()) / "agent-reach-before"


def build_at(rev: str, sink: Callable[[str], None] = print) -> Build:
    """agent-reach as commit `rev` of this repository had it: the commit's files (`git
    archive`, so no worktree or branch is touched) with a venv of their own (`pip install`),
    under /tmp/agent-reach-before/SHA, made once and kept for later runs."""
    repo = str(HERE.parent)
    found = subprocess.run(
        ["git", "-C", repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"],
        capture_output=True,
        text=True,
        check=False,
    )
    if found.returncode:
        raise SystemExit(f"--before {rev}: not a commit of {repo}")
    sha = found.stdout.strip()
    folder = BEFORE_ROOT / sha[:12]
    venv = folder / ".venv"
    stamp = venv / ".bench-installed"
    if not stamp.exists():
        sink(f"  building agent-reach at {sha[:7]} ({rev}) into {folder} (once)")
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        archive = subprocess.run(
            ["git", "-C", repo, "archive", sha], capture_output=True, check=True, timeout=120
        )
        subprocess.run(["tar", "-x", "-C", str(folder)], input=archive.stdout, check=True)
        with (folder / "install.log").open("wb") as log:
            for cmd in (
                [sys.executable, "-m", "venv", str(venv)],
                [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", str(folder)],
            ):
                done = subprocess.run(cmd, stdout=log, stderr=log, check=False, timeout=900)
                if done.returncode:
                    raise SystemExit(f"--before {rev}: {cmd[-1]} failed; see {log.name}")
        stamp.touch()
    return Build(f"agent-reach @{sha[:7]}", str(venv / "bin" / "agent-reach"))


def add_before(parser: argparse.ArgumentParser) -> None:
    """The `--before REV` option: measure an older commit's agent-reach beside this tree's."""
    parser.add_argument(
        "--before",
        metavar="REV",
        help="also measure agent-reach at git commit REV (built once under /tmp), beside this "
        "tree's, in the same run",
    )


def builds(before: str | None) -> list[Build]:
    """This tree's agent-reach, then `before`'s (when given)."""
    return [THIS_TREE, *([build_at(before)] if before else [])]


def side_by_side(
    results: Mapping[str, Mapping[str, Any]], only: tuple[str, ...] | None = None
) -> str:
    """A markdown table of each build's results (a column per build; nested figures as dotted
    rows; `only` these top-level keys, if given), for figures that are whole runs of their own
    (bench/chaos.py, bench/abuse.py)."""

    def rows(data: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
        for key, value in data.items():
            if isinstance(value, Mapping) and value:
                yield from rows(value, f"{prefix}{key}.")
            else:
                yield f"{prefix}{key}", value

    flat = {
        label: dict(rows({k: v for k, v in r.items() if only is None or k in only}))
        for label, r in results.items()
    }
    keys = list(dict.fromkeys(k for r in flat.values() for k in r))
    lines = ["| | " + " | ".join(flat) + " |", "|---" * (len(flat) + 1) + "|"]
    for key in keys:
        cells = ("—" if key not in r else _plain(r[key]) for r in flat.values())
        lines.append(f"| {key} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _plain(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value).replace("|", "\\|")


def descendants(pid: int) -> list[int]:
    """`pid` and every process below it."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    tree, todo = [], [pid]
    while todo:
        p = todo.pop()
        tree.append(p)
        todo += children.get(p, [])
    return tree


def cpu_s(pid: int) -> float:
    """The CPU time (user + system) process `pid` and its descendants (nginx's worker) used."""
    ticks = 0
    for p in descendants(pid):
        with contextlib.suppress(OSError, IndexError):
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int) -> float:
    """The resident memory (VmRSS) of `pid` and its descendants, in MB."""
    total_kb = 0
    for p in descendants(pid):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total_kb += int(line.split()[1])
    return total_kb / 1024


def ensure_apt(package: str, binary: str, log: IO[str] | None = None) -> str | None:
    """The path of `binary`, installing Debian's `package` with apt-get if it is missing."""

    def which() -> str | None:
        return shutil.which(binary) or shutil.which(binary, path="/usr/sbin:/sbin")

    if which() or os.geteuid() != 0 or not shutil.which("apt-get"):
        return which()
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "-q", "--no-install-recommends", package]
    for cmd in (install, ["apt-get", "update", "-q"], install):
        with contextlib.suppress(subprocess.TimeoutExpired):
            subprocess.run(cmd, stdout=log, stderr=log, env=env, check=False, timeout=180)
        if which():
            break
    return which()


def ensure_wrk() -> str | None:
    return ensure_apt("wrk", "wrk")


def publish(name: str, results: Mapping[str, Any], report: str) -> None:
    """bench/results/NAME.json (`results`) and NAME.md (`report`, printed too)."""
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps(results, indent=2) + "\n")
    (RESULTS / f"{name}.md").write_text(report)
    print()
    print(report)


# -- statistics and machine -------------------------------------------------------------------


def pct(values: list[float], q: float) -> float:
    """The `q` quantile (0..1) of `values`, nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def spread(values: list[float]) -> dict[str, float]:
    """p50, p99 and the sample count."""
    return {"p50": pct(values, 0.5), "p99": pct(values, 0.99), "n": len(values)}


def machine() -> dict[str, Any]:
    """What the numbers were measured on. The CPU's family, model and clock go with its name:
    VMs of one kind have all said "AMD EPYC", with an interpreter 1.6× slower on one than on
    another (docs/decisions.md)."""
    found: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            found.setdefault(key.strip(), value.strip())
            if line.startswith("cpu MHz"):
                break
    cpu = found.get("model name", "unknown")
    if "cpu family" in found:
        mhz = f", {float(found['cpu MHz']):.0f} MHz" if "cpu MHz" in found else ""
        cpu += f" (family {found['cpu family']} model {found.get('model', '?')}{mhz})"
    mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return {
        "cpu": cpu,
        "cpus": os.cpu_count(),
        "memory_gib": round(mem_gib, 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
    }


# -- one request at a time --------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """Where and what to POST: one peer in one scenario."""

    port: int
    headers: Mapping[str, str] = field(default_factory=dict)
    body: str = BODY
    path: str = PATH

    def all_headers(self) -> dict[str, str]:
        return {"Content-Type": "application/json", **self.headers}

    def wire(self) -> bytes:
        """The request as an HTTP/1.1 client sends it on a socket of its own."""
        body = self.body.encode()
        head = [f"POST {self.path} HTTP/1.1", "Host: 127.0.0.1", f"Content-Length: {len(body)}"]
        head += [f"{k}: {v}" for k, v in self.all_headers().items()]
        return ("\r\n".join(head) + "\r\n\r\n").encode() + body


class Client:
    """One keep-alive connection to one target; `post()` times a request in ms (None when the
    answer is not a 200). A connection the server closed while idle is reopened once."""

    def __init__(self, target: Target, timeout: float = 30.0) -> None:
        self.target = target
        self.timeout = timeout
        self.conn = http.client.HTTPConnection("127.0.0.1", target.port, timeout=timeout)
        self.headers = target.all_headers()
        self.body = target.body.encode()

    def post(self) -> float | None:
        for attempt in (1, 2):
            start = time.perf_counter()
            try:
                self.conn.request("POST", self.target.path, self.body, self.headers)
                resp = self.conn.getresponse()
                resp.read()
            except (http.client.RemoteDisconnected, ConnectionError, BrokenPipeError):
                self.conn.close()
                if attempt == 2:
                    raise
                continue
            if resp.will_close:
                self.conn.close()
            ms = (time.perf_counter() - start) * 1000
            return ms if resp.status == 200 else None
        return None

    def close(self) -> None:
        self.conn.close()


def interleaved(
    targets: Mapping[str, Target],
    total: int,
    *,
    per_round: int = 100,
    settle: int = 10,
    warmup: int = 50,
    max_s: float = 60.0,
) -> tuple[dict[str, list[float]], dict[str, int]]:
    """Sequential keep-alive requests to every target, in rounds of `per_round` each so that
    machine noise hits all alike, until `total` kept each or `max_s` seconds (whole rounds).

    The first `settle` requests of a round are sent but not kept: a CPU that was idle or busy
    with another target answers its first few requests slower (here ~1.2 ms falling to 0.6 ms
    over the first ten through agent-reach), which would measure the interleaving, not the
    target. Returns the latencies (ms) of the 200s and the count of other answers, per target.
    """
    clients = {name: Client(t) for name, t in targets.items()}
    samples: dict[str, list[float]] = {name: [] for name in targets}
    failed = dict.fromkeys(targets, 0)
    try:
        for client in clients.values():
            for _ in range(warmup):
                client.post()
        stop = time.monotonic() + max_s
        while min(len(v) + failed[k] for k, v in samples.items()) < total:
            if time.monotonic() > stop:
                break
            for name, client in clients.items():
                for i in range(per_round):
                    ms = client.post()
                    if i < settle:
                        continue
                    if ms is None:
                        failed[name] += 1
                    else:
                        samples[name].append(ms)
    finally:
        for client in clients.values():
            client.close()
    return samples, failed


def wait_until_ok(target: Target, timeout_s: float, poll_s: float = 0.002) -> float | None:
    """Seconds until `target` first answers 200 (polling every `poll_s`), None on timeout."""
    start = time.perf_counter()
    body, headers = target.body.encode(), target.all_headers()
    while time.perf_counter() - start < timeout_s:
        conn = http.client.HTTPConnection("127.0.0.1", target.port, timeout=timeout_s)
        try:
            conn.request("POST", target.path, body, headers)
            resp = conn.getresponse()
            resp.read()
            if resp.status == 200:
                return time.perf_counter() - start
        except OSError:
            pass
        finally:
            conn.close()
        time.sleep(poll_s)
    return None


# -- many requests at a time: wrk ---------------------------------------------------------------


def wrk_script(target: Target) -> str:
    """A wrk Lua script that POSTs `target`'s body with its headers."""

    def quoted(text: str) -> str:
        return f"[==[{text}]==]"

    lines = ['wrk.method = "POST"', f"wrk.body = {quoted(target.body)}"]
    lines += [
        f"wrk.headers[{json.dumps(k)}] = {quoted(v)}" for k, v in target.all_headers().items()
    ]
    return "\n".join(lines) + "\n"


def wrk_run(
    wrk: str, target: Target, conns: int, seconds: float, script: Path, cpu: int | None = 1
) -> dict[str, Any]:
    """One wrk run (1 thread, `conns` connections) pinned to `cpu`: req/s, p50/p99 ms, the
    number of requests, of non-2xx answers and of socket errors (and `failure`, why wrk
    failed, if it did)."""
    script.write_text(wrk_script(target))
    cmd = [
        wrk,
        "-t1",
        f"-c{conns}",
        f"-d{max(1, round(seconds))}s",
        "--timeout",
        "10s",
        "--latency",
        "-s",
        str(script),
        f"http://127.0.0.1:{target.port}{target.path}",
    ]
    done = subprocess.run(
        pinned(cpu, cmd), capture_output=True, text=True, check=False, timeout=seconds + 60
    )
    result = parse_wrk(done.stdout)
    if done.returncode != 0 or not result["requests"]:
        result["failure"] = (done.stderr or done.stdout).strip()[-300:] or f"exit {done.returncode}"
    return result


def parse_wrk(out: str) -> dict[str, Any]:
    def grab(pattern: str) -> str | None:
        found = re.search(pattern, out)
        return found.group(1) if found else None

    errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    return {
        "rps": float(grab(r"Requests/sec:\s+([\d.]+)") or 0),
        "p50_ms": _ms(grab(r"50%\s+([\d.]+\w+)") or "0ms"),
        "p99_ms": _ms(grab(r"99%\s+([\d.]+\w+)") or "0ms"),
        "requests": float(grab(r"(\d+) requests in") or 0),
        "non_2xx": float(grab(r"Non-2xx or 3xx responses: (\d+)") or 0),
        "socket_errors": float(sum(int(n) for n in errors.groups())) if errors else 0.0,
    }


def _ms(text: str) -> float:
    value = float(re.match(r"[\d.]+", text).group(0))  # type: ignore[union-attr]
    unit = re.sub(r"[\d.]+", "", text)
    return value * {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60000.0}[unit]


def python_load(
    target: Target, conns: int, seconds: float, cpu: int | None = 1
) -> dict[str, float]:
    """The stand-in for wrk where it cannot be had: aiohttp with `conns` workers, in its own
    process pinned to `cpu`."""
    url = f"http://127.0.0.1:{target.port}{target.path}"
    code = f"""
import asyncio, time, aiohttp
async def main():
    done = bad = 0; lat = []
    stop = time.perf_counter() + {seconds}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit={conns})) as s:
        async def worker():
            nonlocal done, bad
            while time.perf_counter() < stop:
                t = time.perf_counter()
                async with s.post({url!r}, data={target.body!r}, headers={target.all_headers()!r}) as r:
                    await r.read()
                    bad += r.status >= 300
                lat.append((time.perf_counter() - t) * 1000); done += 1
        await asyncio.gather(*(worker() for _ in range({conns})))
    lat.sort(); print(done / {seconds}, lat[len(lat) // 2], lat[int(0.99 * len(lat))], done, bad)
asyncio.run(main())
"""
    out = subprocess.run(
        pinned(cpu, [sys.executable, "-c", code]),
        capture_output=True,
        text=True,
        check=True,
        timeout=seconds + 60,
    ).stdout
    rps, p50, p99, done, bad = map(float, out.split())
    return {
        "rps": rps,
        "p50_ms": p50,
        "p99_ms": p99,
        "requests": done,
        "non_2xx": bad,
        "socket_errors": 0.0,
    }


class Load:
    """Throughput runs with wrk, or the Python stand-in when wrk cannot be installed."""

    def __init__(self, workdir: Path) -> None:
        self.wrk = ensure_wrk()
        self.name = "wrk" if self.wrk else "python-aiohttp (wrk unavailable)"
        self.script = workdir / "post.lua"

    def run(self, target: Target, conns: int, seconds: float) -> dict[str, Any]:
        try:
            if self.wrk:
                return wrk_run(self.wrk, target, conns, seconds, self.script)
            return python_load(target, conns, seconds)
        except (subprocess.SubprocessError, ValueError) as exc:
            return {**parse_wrk(""), "failure": f"{type(exc).__name__}: {exc}"[-300:]}


@contextlib.contextmanager
def timed(label: str, sink: Callable[[str], None] = print) -> Iterator[None]:
    """Prints how long a phase took."""
    start = time.monotonic()
    yield
    sink(f"  ({label}: {time.monotonic() - start:.1f} s)")
