"""agent-reach against its peers, side by side in one run on one upstream: direct to the
upstream, nginx as a plain reverse proxy (the floor for one hop), `agent-reach serve`, the
LiteLLM proxy and Portkey's open-source gateway.

    .venv/bin/python bench/peers [--quick] [--peers nginx[,LiteLLM,Portkey]] [--before REV]

- `--quick`: a short run to try the script out. `--peers`: only these peers beside agent-reach
  (always measured), e.g. `--peers nginx` for the fast loop of issue 13 item 6 (agent-reach's
  hop against nginx's): nothing else is installed or started, and the results go to
  bench/results/peers-nginx.{json,md} so that latest.* stays the full run's. `--before REV`:
  agent-reach at commit REV too, as one more peer beside this tree's (bench/common.py's
  `build_at`), and this tree's figures over its.

- Upstream: nginx answering a fixed chat.completion on loopback (so the upstream is never the
  bottleneck; its own ceiling is the "direct" column) and tests/fakes/bench.py's paced SSE
  stream (20 chunks 5 ms apart) for streaming.
- Peers are installed by this script into bench/.peers/ (git-ignored): LiteLLM in its own
  venv, Portkey with npm, matplotlib in a venv of its own for the chart. One that cannot be
  installed or started is left out, and the output says why. Their configs: bench/peers/.
- nginx as a peer: a second nginx, one worker (`nginx_proxy_conf`), routing by path prefix;
  like agent-reach it has a raw-failover twin, so failover is measured both ways: every
  request paying for the dead upstream, and the dead upstream once remembered (nginx's
  max_fails/fail_timeout, agent-reach's circuit). The ratios of issue 13 item 6 (agent-reach's
  figures over nginx's) are printed with the targets.
- Pinning: every proxy under test on CPU 0; the upstream nginx, the SSE upstream, wrk and this
  script's own client on CPU 1.
- Scenarios: added latency at 1 in flight (interleaved rounds, keep-alive); throughput and p99
  at 32 and 128 in flight (wrk); primary refusing connections → backup and primary answering
  500 → backup (added latency vs the backup alone, through the same peer); streaming added
  TTFB and per-chunk gap (vs direct to the SSE upstream); RSS of the peer's process tree idle
  and after 100k requests; cold start from spawn to the first 200.
Results: bench/results/latest.json, latest.md (the table printed at the end), latest.png."""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

from common import Processes, add_before, builds, publish

from .base import INSTALLS, Settings
from .install import PEERS
from .report import chart, markdown
from .scenarios import Bench


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a short run to try the script")
    parser.add_argument(
        "--peers",
        type=_peer_names,
        default=PEERS,
        help=f"only these peers beside agent-reach, comma-separated (of {', '.join(PEERS)})",
    )
    add_before(parser)
    args = parser.parse_args()
    wanted: tuple[str, ...] = args.peers
    began = time.monotonic()
    logs = INSTALLS / "logs"
    shutil.rmtree(logs, ignore_errors=True)
    logs.mkdir(parents=True)
    workdir = Path(tempfile.mkdtemp(prefix="agent-reach-peers-"))
    print("agent-reach and its peers, one run, one upstream (bench/peers)", flush=True)
    print(f"  installs in bench/.peers/, logs in {logs}", flush=True)
    try:
        with Processes() as procs:
            settings = Settings.quick() if args.quick else Settings()
            bench = Bench(procs, settings, logs, workdir, wanted, tuple(builds(args.before)))
            bench.run()
    except KeyboardInterrupt:
        sys.exit("interrupted; every process it started has been stopped")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    results = bench.results
    results["duration_s"] = round(time.monotonic() - began, 1)
    name = "latest" if wanted == PEERS else "peers-" + "-".join(wanted).lower()
    publish(name, results, markdown(results))
    if wanted == PEERS:
        chart(results)


def _peer_names(text: str) -> tuple[str, ...]:
    """`--peers`: names from PEERS (any case), kept in PEERS's order."""
    given = {n.strip().lower() for n in text.split(",") if n.strip()}
    unknown = given - {p.lower() for p in PEERS}
    if unknown or not given:
        raise argparse.ArgumentTypeError(f"peers are {', '.join(PEERS)}; not {text!r}")
    return tuple(p for p in PEERS if p.lower() in given)


if __name__ == "__main__":
    main()
