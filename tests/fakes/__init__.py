"""The fake providers, shared by the tests and the benchmarks; all on 127.0.0.1.

| module        | what                                                                          |
|---------------|-------------------------------------------------------------------------------|
| `serving`     | running one: an aiohttp app on a free port, in the caller's loop or a thread's |
| `shapes`      | what providers say: completions, chunks, SSE events                           |
| `upstream`    | `Upstream`: one scenario per path (failures, streams, caps, agents' APIs)      |
| `wire`        | `Wire`: a route table of recorded wire samples, for the dialect tests         |
| `dialects`    | `DialectServer`: every provider dialect on its real path, for `probe`, `init` |
| `bench`       | the benchmarks' upstream, a process of its own: `python -m tests.fakes.bench` |
"""
