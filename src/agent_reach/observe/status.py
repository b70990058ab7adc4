"""What is known about the providers now, as one view (protocol §12): the proxy's
`/agent-reach/v1/status` and status page, and the CLI's `status` and `report`, all show it.

Remembered state belongs to a provider's identity (`identity`): a configured provider shows
the circuit and budgets of its own identity; `everything` adds what the store holds for other
identities (other configs, or this one's providers before their endpoint or key changed).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..core import identity

if TYPE_CHECKING:
    from ..engine.loop import Engine
    from ..engine.prepared import PreparedProvider
    from ..state import LoggedAttempt


async def quota_use(engine: Engine, prepared: PreparedProvider) -> list[dict[str, Any]]:
    """The provider's (or one key's) budgets and how much of each its current window has
    used."""
    return [
        {
            "budget": str(budget),
            "window": key.rpartition("|")[0],
            "used": (used := await engine.store.usage(prepared.quota_key, key)),
            "limit": budget.limit,
            "ratio": round(used / budget.limit, 4),
        }
        for budget, key, _ in engine.ledger.windows.current(prepared.budgets, engine.clock())
    ]


async def recorded(engine: Engine) -> dict[str, str]:
    """For each provider whose key variable is not set here: the state key that a process
    with the key (the proxy) recorded a circuit under, for its name at its endpoint."""
    missing = {
        identity.at_endpoint(name, p.spec.endpoint): name
        for name, p in engine.prepared.items()
        if p.missing_key
    }
    if not missing:
        return {}
    circuits, _ = await engine.store.entries()
    found: dict[str, str] = {}
    for key in sorted(circuits, key=lambda k: circuits[k].closed):  # open ones first
        name = missing.get(identity.endpoint_of(key) or "")
        if name is not None and name not in found and key != engine.prepared[name].state_key:
            found[name] = key
    return found


async def provider(engine: Engine, name: str, borrowed: str | None = None) -> dict[str, Any]:
    """A configured provider: format, key set, last health check, identity, circuit, quota.
    `borrowed`: the state key another process recorded for it (see `recorded`)."""
    prepared = engine.prepared[name]
    now = engine.clock()
    state_key = borrowed or prepared.state_key
    health = engine.health.results.get(prepared.state_key)
    note = {}
    if prepared.missing_key:
        found = "showing what the proxy recorded" if borrowed else "nothing recorded under a key"
        note = {"note": f"{prepared.missing_key} not set here; {found}"}
    return {
        "provider": name,
        "in_config": True,
        "format": prepared.spec.format,
        "embeddings": dict(prepared.spec.embeddings.models) if prepared.spec.embeddings else {},
        "key": None if not prepared.spec.api_key_env else bool(prepared.key),
        "health": None
        if health is None
        else {
            "ok": health.ok,
            "age_s": round(now - health.checked_at, 1),
            "detail": prepared.redact(health.outcome.detail),
            "models": sorted(health.models) if health.models is not None else None,
        },
        "fingerprint": identity.split(state_key)[1],
        "circuit": (await engine.store.circuit(state_key)).view(now, engine.config.tz),
        "quota": await quota_use(engine, prepared),
        "learned_caps": [
            {k: v for k, v in row.items() if k in ("model", "tokens", "expires_in_s")}
            for row in await learned_caps(engine)
            if row["key"].startswith(f"{state_key}|")
        ],
        "latency_p95_ms": prepared.spec.metadata.get("latency_p95_ms"),
        **note,
        **({"keys": await keys(engine, name)} if len(engine.pools[name]) > 1 else {}),
    }


async def keys(engine: Engine, name: str) -> list[dict[str, Any]]:
    """Each key of a provider's pool: its variable (never its value), whether it is set, its
    weight, its identity, circuit and budgets."""
    now = engine.clock()
    return [
        {
            "env": member.pool_key,
            "set": member.key is not None,
            "weight": member.key_weight,
            "fingerprint": identity.split(member.state_key)[1],
            "circuit": (await engine.store.circuit(member.state_key)).view(now, engine.config.tz),
            "quota": await quota_use(engine, member),
        }
        for member in engine.pools[name]
    ]


async def learned_caps(engine: Engine) -> list[dict[str, Any]]:
    """Every learned output cap the store keeps (protocol §4): its provider (by name, with its
    fingerprint), model, tokens and the seconds until it expires, and whether the provider's
    identity is this config's."""
    now = engine.clock()
    mine = {p.state_key: name for name, p in engine.prepared.items()}
    rows = []
    for key, cap in sorted((await engine.store.learned_caps(now)).items()):
        state_key, _, model = key.partition("|")
        name, fp = identity.split(state_key)
        rows.append(
            {
                "key": key,
                "provider": mine.get(state_key, name),
                "fingerprint": fp,
                "model": model,
                "tokens": cap.tokens,
                "expires_in_s": round(cap.until - now),
                "in_config": state_key in mine,
            }
        )
    return rows


async def elsewhere(engine: Engine, borrowed: frozenset[str] = frozenset()) -> list[dict[str, Any]]:
    """What the store holds for identities outside this config (but the `borrowed` ones it
    shows as its own): circuits and budget counters, each with its provider name and
    fingerprint (`in_config: False`)."""
    members = [m for pool in engine.pools.values() for m in pool]
    mine = {m.state_key for m in members} | {m.quota_key for m in members} | borrowed
    circuits, used = await engine.store.entries()
    now = engine.clock()
    rows: list[dict[str, Any]] = []
    for key, state in sorted(circuits.items()):
        if key not in mine:
            name, fp = identity.split(key)
            circuit = state.view(now, engine.config.tz)
            rows.append({"provider": name, "fingerprint": fp, "circuit": circuit})
    for (key, window), count in sorted(used.items()):
        if key not in mine:
            name, fp = identity.split(key)
            quota = [{"window": window.rpartition("|")[0], "used": count}]
            rows.append({"provider": name, "fingerprint": fp, "quota": quota})
    return [{**r, "in_config": False} for r in rows]


async def providers(engine: Engine, everything: bool = False) -> list[dict[str, Any]]:
    """Every configured provider (see `provider`), and with `everything` the rest."""
    await engine.store.refresh()
    borrowed = await recorded(engine)
    rows = [await provider(engine, name, borrowed.get(name)) for name in engine.prepared]
    return rows + (await elsewhere(engine, frozenset(borrowed.values())) if everything else [])


async def logged(engine: Engine, since: float, everything: bool = False) -> list[LoggedAttempt]:
    """The attempt log since `since`, by provider name (a pool's seats `NAME/VARIABLE`): this
    config's providers (lines written before identities count by name), or with `everything`
    every line, those of other identities named `NAME@FINGERPRINT`."""
    names = {m.state_key: seat for seat, m in engine.seats.items()}  # a pool's by its seats
    names.update((n, n) for n in engine.prepared)
    # A provider whose key is not set here: its lines at its endpoint, whatever the key.
    keyless = {
        identity.at_endpoint(n, p.spec.endpoint): n
        for n, p in engine.prepared.items()
        if p.missing_key
    }
    out = []
    for a in await engine.store.attempts(since):
        name = names.get(a.provider)
        if name is None and keyless:
            name = keyless.get(identity.endpoint_of(a.provider) or "")
        if name is not None:
            out.append(a if name == a.provider else replace(a, provider=name))
        elif everything:
            out.append(a)
    return out
