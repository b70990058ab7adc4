"""What the engine knows of a provider before and after a try, all free of network cost: the
target of its turn (the model it is asked for, its limits, the output cap it takes, configured
or learned), the `turn.Facts` its machine considers, and a learned output cap kept once the
try at it was answered (protocol §4)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..config import Config
from ..core.events import CapEvent, Event
from ..core.turn import Facts
from ..dialects import artifacts
from ..dialects.tokens import input_tokens
from ..state import LearnedCap, StateStore
from .health import HealthMonitor
from .ledger import Ledger
from .operation import Operation
from .prepared import PreparedProvider
from .run import Run
from .send import Target

CAP_KEEP_S = 86400.0  # a learned output cap is kept a day, then learned again if still true


class Knowledge:
    """The free facts of the engine's providers, from its store, ledger and health checks."""

    def __init__(
        self,
        config: Config,
        store: StateStore,
        ledger: Ledger,
        health: HealthMonitor,
        clock: Callable[[], float],
        emit: Callable[[Event], None],
    ) -> None:
        self.config = config
        self.store = store
        self.ledger = ledger
        self.health = health
        self.clock = clock
        self.emit = emit
        self.origins = artifacts.Origins()  # who wrote the reasoning handed to chat clients

    async def target(
        self, run: Run, prepared: PreparedProvider, op: Operation[Any]
    ) -> tuple[Target, int | None]:
        """The try of `run`'s request for `op` on `prepared`, and the output cap the config
        sets for the model it is asked for (None: whatever cap is learned may be kept)."""
        model = op.model_for(prepared, run.req.model)
        configured, window = prepared.spec.limits(model)
        learned = await self.store.cap(prepared.cap_key(model), self.clock())
        cap = configured if learned is None else min(learned, configured or learned)
        first_token_s = run.first_token_s(prepared.spec.first_token_ms)
        target = Target.of(prepared, run.req, model, window, first_token_s, self.origins, cap)
        return target, configured

    async def facts(
        self, run: Run, prepared: PreparedProvider, target: Target, op: Operation[Any]
    ) -> Facts:
        """The free facts a turn considers: model, circuit, budgets, key, health check, and
        the request's estimated input when the model's context window is known."""
        now = self.clock()
        retries = prepared.spec.retries
        lease = (prepared.connect_s + prepared.read_s) * ((1 if retries is None else retries) + 1)
        exhausted = await self.ledger.exhausted(prepared, now)
        window = target.window
        if window is not None and run.input_tokens is None:
            run.input_tokens = input_tokens(run.req.body)
        return Facts(
            serves_model=op.serves(prepared, target.req.model),
            model=target.req.model,
            sent_model=target.model,
            circuit=await self.store.circuit(prepared.state_key),
            missing_key=prepared.missing_key,
            exhausted=exhausted and exhausted[0],
            has_health=self.health.enabled(prepared),
            lease_s=max(lease, 1.0),
            reopens_in=exhausted and exhausted[1],
            context_window=window,
            larger_than=run.walk.larger_than,
            auth_last_resort=self.config.last_resort_includes_auth,
            input_tokens=run.input_tokens,
            refused_model=prepared.refuses(target.model),
        )

    async def learn(self, prepared: PreparedProvider, model: str, tokens: int) -> None:
        """Keep the output cap a provider's refusal stated, once the request sent again with
        it was answered: for a model the config names (never a client's own string), for
        `CAP_KEEP_S`; told once (the caller keeps none when the config sets one for the model:
        the operator's word wins)."""
        if not prepared.names_model(model):
            return
        now = self.clock()
        cap = LearnedCap(tokens, now + CAP_KEEP_S)
        before = await self.store.set_cap(prepared.cap_key(model), cap, now)
        if before is None or before > tokens:
            self.emit(CapEvent(prepared.name, model, before, tokens, CAP_KEEP_S))
