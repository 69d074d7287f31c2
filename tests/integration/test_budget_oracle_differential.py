"""The service decides exactly as the reference model (tests/support/oracle.py) does.

Random interleavings of Reserve, Consume, Release, Check, expiry, sweeps, calendar days
passing, Resume and Close across two or three runs sharing one or two pooled budgets (windows
none and day, hard and advisory), with twins (same request id, same payload) and reused ids,
run through the service's use cases on real Postgres as the application role, one call at a
time. After every call the answer is compared with the model's (the reply, or the refusal's
reason and facts), and so is every row of the tenant: runs, pool balances, holds, the ledger,
events and the request log.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timedelta
from types import ModuleType
from typing import Any
from unittest import mock

import asyncpg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import event as hypothesis_event
from hypothesis import note as hypothesis_note
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context
from prometheus_client import CollectorRegistry

from budget_service.adapters.metrics import BudgetMetrics
from budget_service.domain import commands as cmd
from budget_service.domain import refusals as refusals_module
from budget_service.domain.policy import (
    BudgetPolicy,
    Dimension,
    Enforcement,
    HostCeilings,
    OnExhaustion,
    Scope,
    ScopeBudget,
    ScopeBudgetKind,
    Window,
)
from budget_service.domain.records import PoolKey
from budget_service.domain.run_state import (
    ReservationState,
    ReserveMode,
    RunOutcome,
    RunState,
)
from budget_service.store import stored_replies as replies
from budget_service.store.event_hub import EVENTS_CHANNEL, EventHub
from budget_service.usecases import reservations as reservations_module
from budget_service.usecases.reservations import Reservations
from budget_service.usecases.runs import BudgetService
from budget_service.usecases.settings import BudgetSettings
from budget_service.usecases.sweeper import Sweeper
from budget_service.usecases.transactions import Transactions
from servicekit.db import Database
from servicekit.errors import DomainError
from servicekit.idempotency import RequestKey
from servicekit.settings import Env
from tests.support import oracle as model
from tests.support.oracle import Answer, BudgetOracle, Item

DIMS = tuple(Dimension)
SUFFIXES = tuple(d.field_name for d in Dimension)
MODELS = ("gpt-4o", "gpt-4o-mini", "claude-3", "")
PROJECT, WORKFLOW, AGENTS = "proj", "wf", ("agent-1", "agent-2")
Quad = tuple[int, int, int, int]


def event(text: str) -> None:
    """Counted in the statistics of a property test (the named cases have none)."""
    if currently_in_test_context():
        hypothesis_event(text)


def note(text: str) -> None:
    if currently_in_test_context():
        hypothesis_note(text)


Limits = tuple[int | None, int | None, int | None, int | None]
# A pooled budget: its window, limits, enforcement and max_model_calls.
PoolSpec = tuple[Window, Limits, Enforcement, int | None]

# The engine of issue #13 (budget.decide_v1 behind budget_service/store/decisions.py): where it
# is present, batches of several items go to it directly and are compared item by item with
# the model's batch, and the refusals that current main rolls back are issued too.
try:
    DECISIONS: ModuleType | None = importlib.import_module("budget_service.store.decisions")
except ModuleNotFoundError:
    DECISIONS = None
REFUSAL_ERROR: Callable[[Any], DomainError] | None = getattr(refusals_module, "refusal_error", None)


def limits_policy(limits: Limits, **policy: Any) -> BudgetPolicy:
    tokens, cost, tool_calls, retries = limits
    return BudgetPolicy(tokens, cost, tool_calls, retries, **policy)


@dataclass
class Harness:
    database_url: str
    db: Database
    conn: asyncpg.Connection  # the superuser: reads every row, moves time


@pytest.fixture
async def harness(app_database_url: str, database_url: str) -> AsyncIterator[Harness]:
    env = Env({"RATION_DATABASE_URL": app_database_url, "RATION_BUDGET_METRICS_LISTEN": "off"})
    db = Database(app_database_url, BudgetSettings.from_env(env).database)
    await db.connect()
    conn = await asyncpg.connect(database_url)
    try:
        yield Harness(app_database_url, db, conn)
    finally:
        await conn.close()
        await db.close()


# --- the service side -----------------------------------------------------------------------


@dataclass
class Service:
    tenant: str
    tx: Transactions
    runs: BudgetService
    reservations: Reservations
    sweeper: Sweeper


def _service(harness: Harness, tenant: str, host_advisory: bool, ceiling: int | None) -> Service:
    values = {
        "RATION_DATABASE_URL": harness.database_url,
        "RATION_BUDGET_METRICS_LISTEN": "off",
        "RATION_ENFORCE": "advisory" if host_advisory else "hard",
    }
    if ceiling is not None:
        values["RATION_MAX_BUDGET_TOKENS"] = str(ceiling)
    tx = Transactions(
        harness.db, BudgetSettings.from_env(Env(values)), BudgetMetrics(CollectorRegistry())
    )
    hub = EventHub(harness.database_url, EVENTS_CHANNEL)
    return Service(tenant, tx, BudgetService(tx, hub), Reservations(tx), Sweeper(tx))


def refusal_of(error: DomainError) -> dict[str, str]:
    return {"reason": error.reason, **error.metadata}


# --- reading every row of the tenant --------------------------------------------------------


def _quad(row: asyncpg.Record, prefix: str) -> Quad:
    t, c, tc, r = (int(row[f"{prefix}_{s}"]) for s in SUFFIXES)
    return (t, c, tc, r)


def _pool_tuple(key: PoolKey) -> tuple[str, str, datetime]:
    return (key.ref.scope.value, key.ref.scope_id, key.window_start)


def _sorted_pools(pools: list[tuple[str, str, datetime]]) -> tuple[tuple[str, str, datetime], ...]:
    # Usage without a hold lists the run's current windows in the order its pooled budgets
    # were read (no ORDER BY): compared in the canonical order.
    rank = {"workflow": 0, "agent": 1, "project": 2}
    return tuple(sorted(pools, key=lambda p: (rank[p[0]], p[1], p[2])))


def _ledger_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Consecutive expiries of one call are written in the order the UPDATE returned them
    (unspecified): compared by reservation id."""
    out: list[dict[str, Any]] = []
    i = 0
    while i < len(rows):
        j = i
        while (
            j < len(rows)
            and rows[j]["decision"] == "expire"
            and rows[j]["request_id"] == rows[i]["request_id"]
            and rows[i]["decision"] == "expire"
        ):
            j += 1
        if j > i + 1:
            out += sorted(rows[i:j], key=lambda r: r["reservation_id"])
            i = j
        else:
            out.append(rows[i])
            i += 1
    return out


def _detail(decision: str, detail: Any) -> Any:
    if decision == "open" and detail is not None:
        return {**detail, "pools": sorted(detail["pools"])}
    return detail


async def db_state(conn: asyncpg.Connection, tenant: str) -> dict[str, Any]:
    runs = {
        r["run_id"]: {
            "state": r["state"],
            "outcome": r["outcome"],
            "limits": tuple(r[f"max_{s}"] for s in SUFFIXES),
            "binding": json.loads(r["binding"]),
            "policy_version": r["policy_version"],
            "consumed": _quad(r, "consumed"),
            "held": _quad(r, "held"),
            "crossed": list(r["crossed"]),
            "exhausted": list(r["exhausted"]),
            "breached": list(r["breached"]),
            "stopped": (
                r["stopped_dimension"],
                r["stopped_limit"],
                r["stopped_consumed"],
                r["stopped_observed"],
                r["stopped_scope"],
                r["stopped_scope_id"],
            ),
            "next_seq": r["next_seq"],
            "advisory_refusals": r["advisory_refusals"],
            "scope_advisory": r["scope_advisory"],
            "pools": sorted(zip(r["pool_scopes"], r["pool_scope_ids"], strict=True)),
        }
        for r in await conn.fetch("SELECT * FROM budget.runs WHERE tenant_id = $1", tenant)
    }
    pools = {
        (r["scope"], r["scope_id"], r["window_start"]): (
            _quad(r, "consumed"),
            _quad(r, "held"),
            (r["consumed_model_calls"], r["held_model_calls"]),
        )
        for r in await conn.fetch("SELECT * FROM budget.pool_balances WHERE tenant_id = $1", tenant)
    }
    holds = {
        (r["run_id"], r["reservation_id"]): {
            "model": r["model"],
            "requested": _quad(r, "requested"),
            "granted": _quad(r, "granted"),
            "model_calls": r["granted_model_calls"],
            "state": r["state"],
            "pools": tuple(
                zip(r["pool_scopes"], r["pool_scope_ids"], r["pool_windows"], strict=True)
            ),
            "policy_version": r["policy_version"],
            "created_at": r["created_at"],
            "expires_at": r["expires_at"],
        }
        for r in await conn.fetch("SELECT * FROM budget.holds WHERE tenant_id = $1", tenant)
    }
    ledger: dict[str, list[dict[str, Any]]] = {}
    for r in await conn.fetch(
        "SELECT * FROM budget.ledger WHERE tenant_id = $1 ORDER BY entry_id", tenant
    ):
        detail = json.loads(r["detail"]) if r["detail"] is not None else None
        ledger.setdefault(r["run_id"], []).append(
            {
                "request_id": r["request_id"],
                "decision": r["decision"],
                "reason": r["reason"],
                "reservation_id": r["reservation_id"],
                "model": r["model"],
                "policy_version": r["policy_version"],
                "consumed": _quad(r, "consumed"),
                "held": _quad(r, "held"),
                "model_calls": (r["consumed_model_calls"], r["held_model_calls"]),
                "pools": _sorted_pools(
                    [
                        (p["scope"], p["scope_id"], datetime.fromisoformat(p["window_start"]))
                        for p in json.loads(r["pools"])
                    ]
                ),
                "detail": _detail(r["decision"], detail),
            }
        )
    events: dict[str, list[tuple[int, str, str]]] = {}
    for r in await conn.fetch(
        "SELECT * FROM budget.events WHERE tenant_id = $1 ORDER BY run_id, seq", tenant
    ):
        events.setdefault(r["run_id"], []).append((r["seq"], r["type"], r["payload_json"]))
    requests = {
        r["request_id"]: (bytes(r["fingerprint"]), json.loads(bytes(r["response"])))
        for r in await conn.fetch(
            "SELECT * FROM budget.request_log WHERE tenant_id = $1 AND request_id NOT LIKE 'put-%'",
            tenant,
        )
    }
    return {
        "runs": runs,
        "pools": pools,
        "holds": holds,
        "ledger": {k: _ledger_rows(v) for k, v in ledger.items()},
        "events": events,
        "requests": requests,
    }


def oracle_state(oracle: BudgetOracle) -> dict[str, Any]:
    runs = {}
    for run_id, run in oracle.runs.items():
        s, stop = run.status, run.status.stopped_by
        runs[run_id] = {
            "state": s.state.value,
            "outcome": run.outcome.value if run.outcome else None,
            "limits": tuple(run.budget.limit(d) for d in DIMS),
            "binding": {d.value: v for d, v in run.budget.binding.items()},
            "policy_version": run.policy_version,
            "consumed": model.quad(run.consumed),
            "held": model.quad(run.held),
            "crossed": sorted(s.crossed),
            "exhausted": sorted(s.exhausted),
            "breached": sorted(s.breached),
            "stopped": (
                (
                    stop.dimension.value,
                    stop.limit,
                    stop.consumed,
                    stop.observed,
                    stop.balance.scope.value,
                    stop.balance.scope_id,
                )
                if stop
                else (None,) * 6
            ),
            "next_seq": run.next_seq,
            "advisory_refusals": run.advisory_refusals,
            "scope_advisory": run.scope_advisory,
            "pools": sorted((p.scope.value, p.scope_id) for p in run.pools),
        }
    pools = {
        _pool_tuple(k): (
            model.quad(row.consumed),
            model.quad(row.held),
            (row.consumed_model_calls, row.held_model_calls),
        )
        for k, row in oracle.pool_rows.items()
    }
    holds = {
        key: {
            "model": h.model,
            "requested": model.quad(h.requested),
            "granted": model.quad(h.granted),
            "model_calls": h.model_calls,
            "state": h.state.value,
            "pools": tuple(_pool_tuple(k) for k in h.pools),
            "policy_version": h.policy_version,
            "created_at": h.created_at,
            "expires_at": h.expires_at,
        }
        for key, h in oracle.holds.items()
    }
    ledger: dict[str, list[dict[str, Any]]] = {}
    for row in oracle.ledger:
        ledger.setdefault(row.run_id, []).append(
            {
                "request_id": row.request_id,
                "decision": row.decision,
                "reason": row.reason,
                "reservation_id": row.reservation_id,
                "model": row.model,
                "policy_version": row.policy_version,
                "consumed": row.consumed,
                "held": row.held,
                "model_calls": (row.consumed_model_calls, row.held_model_calls),
                "pools": _sorted_pools([_pool_tuple(k) for k in row.pools]),
                "detail": _detail(row.decision, json.loads(json.dumps(row.detail))),
            }
        )
    events: dict[str, list[tuple[int, str, str]]] = {}
    for e in oracle.events:
        events.setdefault(e.run_id, []).append((e.seq, e.type, e.payload_json))
    requests = {rid: (fp, json.loads(data)) for rid, (fp, data) in oracle.request_log.items()}
    return {
        "runs": runs,
        "pools": pools,
        "holds": holds,
        "ledger": {k: _ledger_rows(v) for k, v in ledger.items()},
        "events": {k: sorted(v) for k, v in events.items()},
        "requests": requests,
    }


def assert_same_rows(found: dict[str, Any], expected: dict[str, Any], step: str) -> None:
    """Every table as the model has it; a difference names the rows that differ."""
    for table in ("runs", "pools", "holds", "ledger", "events", "requests"):
        if found[table] == expected[table]:
            continue
        keys = sorted(set(found[table]) | set(expected[table]), key=repr)
        lines = [
            f"  {key!r}:\n    service: {service!r}\n    model:   {oracle!r}"
            for key in keys
            if (service := found[table].get(key)) != (oracle := expected[table].get(key))
        ]
        raise AssertionError(f"{table} differ after {step}:\n" + "\n".join(lines))


# --- one example ----------------------------------------------------------------------------


@dataclass
class Call:
    """A call as issued (kept so it can be issued again as a twin, or with its id reused)."""

    method: str
    command: Any
    request_id: str
    payload: bytes
    reservation_id: str = ""  # a Reserve's new hold id, when chosen before it is issued


@dataclass
class Example:
    harness: Harness
    service: Service
    oracle: BudgetOracle
    tenant: str
    tag: str
    pools: list[ScopeBudget]
    runs: list[str] = field(default_factory=list)
    calls: list[Call] = field(default_factory=list)
    steps: int = 0
    legacy: bool = DECISIONS is None  # the use cases of current main, one call at a time

    @property
    def conn(self) -> asyncpg.Connection:
        return self.harness.conn

    async def now(self) -> datetime:
        value: datetime = await self.conn.fetchval("SELECT now()")
        return value

    def fingerprint(self, call: Call) -> bytes:
        return RequestKey.of(self.tenant, call.request_id, call.method, call.payload).fingerprint

    def new_call(self, method: str, command: Any) -> Call:
        return Call(method, command, f"{self.tag}-{uuid.uuid4().hex[:12]}", repr(command).encode())

    async def compare_rows(self, step: str) -> None:
        assert_same_rows(await db_state(self.conn, self.tenant), oracle_state(self.oracle), step)

    # --- issuing calls on both sides ------------------------------------------------------

    async def issue(self, call: Call) -> None:
        now = await self.now()
        mutation = cmd.Mutation(call.method, call.request_id, call.payload)
        fp = self.fingerprint(call)
        c = call.command
        if call.method in ("Reserve", "Consume", "Release"):
            item = self._item(call, fp)
            if self.legacy and self._legacy_rolls_back(item, now):
                event("skipped: a not-found/settled refusal that main rolls back")
                return
            got = await self._decide_on_service(call, mutation, item)
            if (
                call.method == "Reserve"
                and got[0] == "ok"
                and got[1].reservation.reservation_id == item.reservation_id
            ):
                now = got[1].reservation.created_at  # the hold's clock: the transaction's
            expected = self.oracle.decide_batch([item], now)[0]
            event(f"{call.method}: {expected.outcome}")
            note(f"{call.method} {call.request_id}: {expected.outcome} {expected.refusal or ''}")
            assert got == self._expected(call.method, expected), (call, expected)
        elif call.method == "Check":
            await self.issue_checks([call])
        elif call.method == "ResumeRun":
            got = await self._lifecycle(
                lambda: self.service.runs.resume_run(
                    self.tenant, mutation, c, lambda view: model.view_bytes(view.dimensions)
                )
            )
            expected = self.oracle.resume(
                call.request_id, fp, c.run_id, c.delta, c.approver, now, c.note
            )
            event(f"ResumeRun: {expected.outcome}")
            assert got == self._lifecycle_expected(expected), c
        elif call.method == "CloseRun":
            got = await self._lifecycle(
                lambda: self.service.runs.close_run(
                    self.tenant,
                    mutation,
                    c,
                    lambda closed: model.close_bytes(closed.view.dimensions, closed.released_holds),
                )
            )
            expected = self.oracle.close(call.request_id, fp, c.run_id, c.outcome, now)
            event(f"CloseRun: {expected.outcome}")
            assert got == self._lifecycle_expected(expected), c
        else:
            raise AssertionError(call.method)
        self.calls.append(call)

    async def issue_batch(self, calls: list[Call]) -> None:
        """Reserve, Consume and Release items as one batch of budget.decide_v1, compared item
        by item with the model's batch (replies byte for byte)."""
        assert DECISIONS is not None
        now = await self.now()
        ttl = self.service.tx.settings.default_hold_ttl_seconds
        items = [self._item(c, self.fingerprint(c)) for c in calls]
        items = [replace(i, ttl_seconds=i.ttl_seconds or ttl) for i in items]
        batch = [DECISIONS.Item(**asdict(i)) for i in items]
        host_advisory = self.service.tx.host_advisory
        answers = await DECISIONS.decide(self.harness.db, self.tenant, batch, host_advisory)
        for item, answer in zip(items, answers, strict=True):
            if item.kind == "reserve" and answer.outcome == "done":
                now = replies.reserve_of(answer.response).reservation.created_at
                break
        expected = self.oracle.decide_batch(items, now)
        event(f"batch of {len(items)}")
        outcomes = [(i.kind, i.request_id, a.outcome) for i, a in zip(items, expected, strict=True)]
        note(f"batch: {outcomes}")
        for n, (item, answer, wanted) in enumerate(zip(items, answers, expected, strict=True)):
            where = (n, item, wanted)
            assert answer.outcome == wanted.outcome, where
            if wanted.outcome in ("done", "replay"):
                # The same document; decide_v1 spells it with json_build_object's whitespace
                # and key order, not stored_replies' canonical bytes.
                assert answer.response is not None, where
                assert json.loads(answer.response) == json.loads(wanted.response or b""), where
            elif wanted.outcome != "reused":
                assert REFUSAL_ERROR is not None
                assert refusal_of(REFUSAL_ERROR(answer.refusal)) == wanted.refusal, where
        self.calls += calls

    async def issue_checks(self, calls: list[Call]) -> None:
        """Checks issued together: the service's batcher may judge them in one statement."""
        now = await self.now()
        found = await asyncio.gather(
            *(self.service.reservations.check(self.tenant, c.command) for c in calls),
            return_exceptions=True,
        )
        for call, result in zip(calls, found, strict=True):
            c = call.command
            answer = self.oracle.check(c.run_id, c.model, model.quad(c.estimate), now)
            if answer is None or isinstance(result, BaseException):
                assert isinstance(result, DomainError), result
                assert answer is None
                assert refusal_of(result) == {"reason": "RUN_NOT_FOUND"}
                continue
            assert (
                result.would_grant,
                result.refusal_reason,
                result.advisory_refusal_reason,
                result.state,
                result.dimensions,
                result.verdict,
            ) == (
                answer.would_grant,
                answer.reason,
                answer.advisory_reason,
                answer.state,
                answer.dimensions,
                answer.verdict,
            ), c

    def _item(self, call: Call, fp: bytes) -> Item:
        c, request_id = call.command, call.request_id
        if call.method == "Reserve":
            return Item(
                "reserve",
                c.run_id,
                model.quad(c.estimate),
                reservation_id=call.reservation_id or f"res_{uuid.uuid4().hex}",
                model=c.model,
                up_to=c.mode is ReserveMode.UP_TO,
                ttl_seconds=c.ttl_seconds,
                request_id=request_id,
                fingerprint=fp,
            )
        if call.method == "Consume":
            usage = model.quad(c.usage)
            return Item("consume", c.run_id, usage, request_id, fp, c.reservation_id, c.model)
        return Item(
            "release",
            c.run_id,
            request_id=request_id,
            fingerprint=fp,
            reservation_id=c.reservation_id,
        )

    def _legacy_rolls_back(self, item: Item, now: datetime) -> bool:
        """On current main a Consume refused RESERVATION_NOT_FOUND or RESERVATION_SETTLED, and
        a Release refused RESERVATION_NOT_FOUND, raise inside the transaction: the expiries
        (and new pool window rows) its lock found are rolled back. engine.md rule 3 keeps
        them, and so does the model. Such calls are not issued until the new engine lands."""
        o = self.oracle
        if item.kind == "reserve" or item.request_id in o.request_log or item.run_id not in o.runs:
            return False
        if item.kind == "consume" and not item.reservation_id:
            return False
        hold = o.holds.get((item.run_id, item.reservation_id))
        refused = hold is None or (
            item.kind == "consume" and hold.state is ReservationState.CONSUMED
        )
        if not refused:
            return False
        run = o.runs[item.run_id]
        missing = any(k not in o.pool_rows for k in o.current_pools(run, now).values())
        return missing or bool(o.overdue_of(item.run_id, now))

    async def _decide_on_service(
        self, call: Call, mutation: cmd.Mutation, item: Item
    ) -> tuple[str, Any]:
        r = self.service.reservations
        try:
            if call.method == "Reserve":
                with mock.patch.object(
                    reservations_module, "new_reservation_id", return_value=item.reservation_id
                ):
                    return ("ok", await r.reserve(self.tenant, mutation, call.command))
            if call.method == "Consume":
                return ("ok", await r.consume(self.tenant, mutation, call.command))
            return ("ok", await r.release(self.tenant, mutation, call.command))
        except DomainError as refused:
            return ("refused", refusal_of(refused))

    @staticmethod
    def _expected(method: str, answer: Answer) -> tuple[str, Any]:
        if answer.outcome in ("done", "replay"):
            assert answer.response is not None
            decode: Callable[[bytes], Any] = {
                "Reserve": replies.reserve_of,
                "Consume": replies.consume_of,
                "Release": replies.release_of,
            }[method]
            return ("ok", decode(answer.response))
        assert answer.refusal is not None
        return ("refused", answer.refusal)

    @staticmethod
    async def _lifecycle(call: Callable[[], Any]) -> tuple[str, Any]:
        try:
            return ("ok", await call())
        except DomainError as refused:
            return ("refused", refusal_of(refused))

    @staticmethod
    def _lifecycle_expected(answer: Answer) -> tuple[str, Any]:
        if answer.outcome in ("done", "replay"):
            return ("ok", answer.response)
        return ("refused", answer.refusal)

    # --- time passing ---------------------------------------------------------------------

    async def expire(self, index: int, whole_run: bool) -> None:
        """A hold's time runs out (or that of every open hold of its run): its expires_at
        moves back to its created_at."""
        open_holds = [h for h in self.oracle.holds.values() if h.state is ReservationState.OPEN]
        if not open_holds:
            return
        chosen = open_holds[index % len(open_holds)]
        for hold in open_holds:
            if hold is chosen or (whole_run and hold.run_id == chosen.run_id):
                await self.conn.execute(
                    "UPDATE budget.holds SET expires_at = created_at"
                    " WHERE tenant_id = $1 AND run_id = $2 AND reservation_id = $3",
                    self.tenant,
                    hold.run_id,
                    hold.reservation_id,
                )
                self.oracle.set_expiry(hold.run_id, hold.reservation_id, hold.created_at)

    async def sweep(self) -> None:
        await self.service.sweeper.sweep()
        self.oracle.sweep(await self.now())

    async def new_day(self) -> None:
        """Midnight passes: every day-window pool row (and the holds on it, and the events of
        its window) is a day older."""
        daily = [(b.scope.value, b.scope_id) for b in self.pools if b.window is Window.DAY]
        if not daily:
            return
        scopes, ids = [s for s, _ in daily], [i for _, i in daily]
        windowed = """(scope, scope_id) IN (SELECT * FROM unnest($2::text[], $3::text[]))"""
        far = timedelta(days=100_000)
        # A window's events (keyed by window and seq, numbered by its row's next_seq) move with
        # its row: left behind, they would collide with those of the new row for that window.
        for table in ("pool_balances", "pool_events"):
            # Two uniform moves, so no row ever meets another's key on the way.
            await self.conn.execute(
                f"UPDATE budget.{table} SET window_start = window_start - $4::interval"
                f" WHERE tenant_id = $1 AND {windowed}",
                self.tenant,
                scopes,
                ids,
                far,
            )
            await self.conn.execute(
                f"UPDATE budget.{table} SET window_start = window_start + $4::interval"
                f" WHERE tenant_id = $1 AND {windowed}",
                self.tenant,
                scopes,
                ids,
                far - timedelta(days=1),
            )
        rows = await self.conn.fetch(
            "SELECT run_id, reservation_id, pool_scopes, pool_scope_ids, pool_windows"
            " FROM budget.holds WHERE tenant_id = $1",
            self.tenant,
        )
        for r in rows:
            windows = [
                w - timedelta(days=1) if (s, i) in daily else w
                for s, i, w in zip(
                    r["pool_scopes"], r["pool_scope_ids"], r["pool_windows"], strict=True
                )
            ]
            await self.conn.execute(
                "UPDATE budget.holds SET pool_windows = $4::timestamptz[]"
                " WHERE tenant_id = $1 AND run_id = $2 AND reservation_id = $3",
                self.tenant,
                r["run_id"],
                r["reservation_id"],
                windows,
            )
        self.oracle.shift_windows(1)

    async def repool(self, index: int, limits: Limits, model_calls: int | None) -> None:
        """An operator changes a pooled budget's limits: they bind live."""
        old = self.pools[index % len(self.pools)]
        budget = ScopeBudget(
            old.scope,
            old.scope_id,
            old.kind,
            limits_policy(limits),
            old.window,
            old.enforcement,
            max_model_calls=model_calls,
        )
        self.pools[index % len(self.pools)] = budget
        await put_scope_budget(self, budget)


async def put_scope_budget(example: Example, budget: ScopeBudget) -> None:
    mutation = cmd.Mutation("PutScopeBudget", f"put-{uuid.uuid4().hex}", repr(budget).encode())
    await example.service.runs.put_scope_budget(example.tenant, mutation, budget, lambda _: b"{}")
    example.oracle.put_scope_budget(budget)


# --- strategies -----------------------------------------------------------------------------

_tokens_limit = st.sampled_from([None, 8, 10, 12, 16, 20, 30, 40])
_cost_limit = st.sampled_from([None, 0, 8, 12, 20, 40])
_tools_limit = st.sampled_from([None, 1, 2, 4])
_retries_limit = st.sampled_from([None, 0, 1, 3])
_limits = st.tuples(_tokens_limit, _cost_limit, _tools_limit, _retries_limit)
_pool_limits = st.tuples(
    st.sampled_from([None, 10, 15, 20, 30, 60]),
    st.sampled_from([None, 5, 15, 30, 60]),
    st.sampled_from([None, 1, 3, 6]),
    st.none(),
)
_model_calls_limit = st.sampled_from([None, None, None, 0, 1, 2, 4])
_run_policies = st.builds(
    lambda limits, allow, deny, threshold, on_exhaustion: limits_policy(
        limits,
        model_allow=allow,
        model_deny=deny,
        threshold_percent=threshold,
        on_exhaustion=on_exhaustion,
    ),
    _limits,
    st.sampled_from([None] * 6 + [("gpt-*",), ("gpt-4o", "claude-*")]),
    st.sampled_from([()] * 4 + [("*mini",)]),
    st.one_of(st.none(), st.sampled_from([0, 50, 80, 100])),
    st.sampled_from(list(OnExhaustion)),
)
_pool_specs = st.lists(
    st.tuples(
        st.sampled_from([Window.NONE, Window.DAY]),
        _pool_limits,
        st.sampled_from([Enforcement.HARD] * 5 + [Enforcement.ADVISORY]),
        _model_calls_limit,
    ),
    min_size=1,
    max_size=2,
)
_run_specs = st.lists(
    st.tuples(
        _run_policies,
        st.sampled_from([0, 1, 2]),  # agent: none, agent-1 (pooled), agent-2
        st.booleans(),  # in the workflow (with a per-run cap, when declared)
    ),
    min_size=2,
    max_size=3,
)
_amounts = st.tuples(
    st.integers(min_value=0, max_value=14),
    st.one_of(st.just(0), st.integers(min_value=1, max_value=14)),
    st.sampled_from([0, 0, 1]),
    st.sampled_from([0, 0, 0, 1]),
)
_run = st.integers(min_value=0, max_value=2)
_index = st.integers(min_value=0, max_value=12)  # 12: an id no hold has
_model = st.sampled_from(MODELS)
_OP_STRATEGIES: dict[str, st.SearchStrategy[tuple[Any, ...]]] = {
    "reserve": st.tuples(
        st.just("reserve"), _run, _amounts, st.booleans(), _model, st.sampled_from([0, 120, 3600])
    ),
    "consume": st.tuples(
        st.just("consume"), _index, _amounts, _model, st.sampled_from([False] * 4 + [True])
    ),
    "unreserved": st.tuples(st.just("unreserved"), _run, _amounts, _model),
    "release": st.tuples(st.just("release"), _index, st.sampled_from([False] * 4 + [True])),
    "expire": st.tuples(st.just("expire"), st.integers(min_value=0, max_value=6), st.booleans()),
    "again": st.tuples(st.just("again"), st.integers(min_value=0, max_value=30)),
    "reuse": st.tuples(st.just("reuse"), st.integers(min_value=0, max_value=30)),
    "check": st.tuples(st.just("check"), _run, _amounts, _model),
    "sweep": st.tuples(st.just("sweep")),
    "new_day": st.tuples(st.just("new_day")),
    "resume": st.tuples(st.just("resume"), st.integers(min_value=0, max_value=4), _amounts),
    "close": st.tuples(st.just("close"), _run, st.sampled_from(list(RunOutcome))),
    "missing": st.tuples(st.just("missing"), _amounts),
    "repool": st.tuples(
        st.just("repool"), st.integers(min_value=0, max_value=1), _pool_limits, _model_calls_limit
    ),
}
# A batch of the engine: calls of the kinds above, twins and reused ids of earlier items of the
# same batch, and Consume or Release of a hold reserved earlier in the batch.
_BATCH_STRATEGIES = [
    _OP_STRATEGIES["reserve"],
    _OP_STRATEGIES["reserve"],
    _OP_STRATEGIES["consume"],
    _OP_STRATEGIES["unreserved"],
    _OP_STRATEGIES["release"],
    st.tuples(st.just("consume_new"), st.integers(min_value=0, max_value=4), _amounts, _model),
    st.tuples(st.just("release_new"), st.integers(min_value=0, max_value=4)),
    st.tuples(st.just("twin"), st.integers(min_value=0, max_value=4)),
    st.tuples(st.just("reused"), st.integers(min_value=0, max_value=4)),
    _OP_STRATEGIES["again"],
    _OP_STRATEGIES["missing"],
]
_OP_STRATEGIES["batch"] = st.tuples(
    st.just("batch"), st.lists(st.one_of(_BATCH_STRATEGIES), min_size=2, max_size=6)
)
_OP_STRATEGIES["checks"] = st.tuples(
    st.just("checks"), st.lists(_OP_STRATEGIES["check"], min_size=2, max_size=4)
)
# Mostly the per-call protocol; now and then time passing and the run lifecycle.
_WEIGHTS = {
    "reserve": 10,
    "consume": 6,
    "unreserved": 3,
    "release": 4,
    "expire": 3,
    "again": 3,
    "reuse": 1,
    "check": 2,
    "sweep": 1,
    "new_day": 1,
    "resume": 2,
    "close": 1,
    "missing": 1,
    "repool": 1,
    "batch": 6,
    "checks": 1,
}
_ops = st.lists(
    st.sampled_from([k for k, n in _WEIGHTS.items() for _ in range(n)]).flatmap(
        _OP_STRATEGIES.__getitem__
    ),
    min_size=8,
    max_size=30,
)


def _estimate(values: Quad) -> dict[Dimension, int]:
    return dict(zip(DIMS, values, strict=True))


def _model_for(name: str, values: Quad) -> str:
    # A model call (tokens or cost) names its model (the API refuses it otherwise).
    return name or ("gpt-4o" if values[0] or values[1] else "")


async def _setup(
    example: Example,
    pool_specs: list[PoolSpec],
    workflow_cap: Limits | None,
    run_specs: list[tuple[BudgetPolicy, int, bool]],
    agent_first: bool,
) -> None:
    # One pool: the project's (every run draws on it) or agent-1's (the runs of other agents
    # draw on none, and take the one-statement path of current main); two: both.
    owners = [(Scope.PROJECT, PROJECT), (Scope.AGENT, AGENTS[0])]
    if agent_first:
        owners.reverse()
    for (scope, scope_id), spec in zip(owners, pool_specs, strict=False):
        window, limits, enforcement, model_calls = spec
        budget = ScopeBudget(
            scope,
            scope_id,
            ScopeBudgetKind.POOLED,
            limits_policy(limits),
            window,
            enforcement,
            max_model_calls=model_calls,
        )
        example.pools.append(budget)
        await put_scope_budget(example, budget)
    if workflow_cap is not None:
        cap = ScopeBudget(
            Scope.WORKFLOW, WORKFLOW, ScopeBudgetKind.PER_RUN, limits_policy(workflow_cap)
        )
        await put_scope_budget(example, cap)
    for n, (policy, agent, in_workflow) in enumerate(run_specs):
        run_id = f"run-{n}"
        opening = cmd.OpenRun(
            run_id,
            PROJECT,
            WORKFLOW if in_workflow else "",
            AGENTS[agent - 1] if agent else "",
            policy,
        )
        call = example.new_call("OpenRun", opening)
        mutation = cmd.Mutation(call.method, call.request_id, call.payload)
        now = await example.now()
        got = await example.service.runs.open_run(
            example.tenant, mutation, opening, lambda view: model.view_bytes(view.dimensions)
        )
        expected = example.oracle.open_run(
            call.request_id,
            example.fingerprint(call),
            run_id,
            opening.project_id,
            opening.workflow_id,
            opening.agent_id,
            policy,
            now,
        )
        assert got == expected.response
        example.runs.append(run_id)
    await example.compare_rows("opening the runs")


def _hold_target(example: Example, index: int, elsewhere: bool) -> tuple[str, str]:
    """(run_id, reservation_id) naming one of the holds so far, on its own run or on another
    one: an open one when the index is even, any one when it is odd; 12 names no hold."""
    holds = list(example.oracle.holds.values())
    live = [h for h in holds if h.state is ReservationState.OPEN]
    if index == 12 or not holds:
        return example.runs[0], "res_unknown"
    pick = live if live and index % 2 == 0 else holds
    hold = pick[index // 2 % len(pick)]
    if elsewhere:
        others = [r for r in example.runs if r != hold.run_id]
        return others[index % len(others)], hold.reservation_id
    return hold.run_id, hold.reservation_id


def _call_of(example: Example, op: tuple[Any, ...]) -> Call | None:
    kind, runs = op[0], example.runs
    if kind == "reserve":
        _, n, values, up_to, name, ttl = op
        values = values if any(values) else (0, 0, 1, 0)  # the API refuses an empty estimate
        mode = ReserveMode.UP_TO if up_to else ReserveMode.ALL_OR_NOTHING
        command: Any = cmd.Reserve(
            runs[n % len(runs)], _model_for(name, values), _estimate(values), ttl, mode
        )
        return example.new_call("Reserve", command)
    if kind == "missing":
        if not any(op[1]):
            return None
        command = cmd.Reserve(
            "run-nobody", "gpt-4o", _estimate(op[1]), 0, ReserveMode.ALL_OR_NOTHING
        )
        return example.new_call("Reserve", command)
    if kind == "consume":
        _, index, values, name, elsewhere = op
        run_id, reservation_id = _hold_target(example, index, elsewhere)
        command = cmd.Consume(run_id, reservation_id, _model_for(name, values), _estimate(values))
        return example.new_call("Consume", command)
    if kind == "unreserved":
        _, n, values, name = op
        command = cmd.Consume(runs[n % len(runs)], "", _model_for(name, values), _estimate(values))
        return example.new_call("Consume", command)
    if kind == "release":
        run_id, reservation_id = _hold_target(example, op[1], op[2])
        return example.new_call("Release", cmd.Release(run_id, reservation_id))
    if kind == "check":
        _, n, values, name = op
        command = cmd.Check(runs[n % len(runs)], _estimate(values), name)
        return example.new_call("Check", command)
    if kind == "resume":
        # Mostly an interrupted run, when there is one: the others are refused.
        stopped = [r for r in runs if example.oracle.runs[r].status.state is RunState.INTERRUPTED]
        pick = stopped if stopped and op[1] < 2 else runs
        run_id = pick[op[1] % len(pick)]
        command = cmd.ResumeRun(run_id, _estimate(op[2]), "oracle-test")
        return example.new_call("ResumeRun", command)
    if kind == "close":
        return example.new_call("CloseRun", cmd.CloseRun(runs[op[1] % len(runs)], op[2]))
    if kind in ("again", "reuse"):
        earlier = [c for c in example.calls if c.method != "Check"]
        if not earlier:
            return None
        call = earlier[op[1] % len(earlier)]
        if kind == "again":
            return call  # a twin: same request id, same payload
        return Call(call.method, call.command, call.request_id, call.payload + b"!")
    return None


def _batch_calls(example: Example, ops: list[tuple[Any, ...]]) -> list[Call]:
    calls: list[Call] = []
    for op in ops:
        kind = op[0]
        if kind in ("twin", "reused"):
            if calls:
                earlier = calls[op[1] % len(calls)]
                changed = replace(earlier, payload=earlier.payload + b"!")
                calls.append(earlier if kind == "twin" else changed)
            continue
        if kind in ("consume_new", "release_new"):
            reserves = [c for c in calls if c.method == "Reserve" and c.reservation_id]
            if reserves:
                hold = reserves[op[1] % len(reserves)]
                run_id, reservation_id = hold.command.run_id, hold.reservation_id
                if kind == "release_new":
                    command: Any = cmd.Release(run_id, reservation_id)
                    calls.append(example.new_call("Release", command))
                else:
                    values, name = op[2], op[3]
                    usage, model_name = _estimate(values), _model_for(name, values)
                    command = cmd.Consume(run_id, reservation_id, model_name, usage)
                    calls.append(example.new_call("Consume", command))
            continue
        if kind == "again":
            earlier = [c for c in example.calls if c.method in ("Reserve", "Consume", "Release")]
            if earlier:
                calls.append(earlier[op[1] % len(earlier)])
            continue
        call = _call_of(example, op)
        if call is not None and call.method == "Reserve":
            call = replace(call, reservation_id=f"res_{uuid.uuid4().hex}")
        if call is not None:
            calls.append(call)
    return calls


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
)
@given(
    host_advisory=st.sampled_from([False] * 6 + [True]),
    ceiling=st.sampled_from([None, None, 45]),
    pool_specs=_pool_specs,
    workflow_cap=st.one_of(st.none(), _limits),
    run_specs=_run_specs,
    agent_first=st.booleans(),
    ops=_ops,
)
async def test_the_service_decides_like_the_reference_model(
    harness: Harness,
    host_advisory: bool,
    ceiling: int | None,
    pool_specs: list[PoolSpec],
    workflow_cap: Limits | None,
    run_specs: list[tuple[BudgetPolicy, int, bool]],
    agent_first: bool,
    ops: list[tuple[Any, ...]],
) -> None:
    await run_example(
        harness, host_advisory, ceiling, pool_specs, workflow_cap, run_specs, agent_first, ops
    )


async def run_example(
    harness: Harness,
    host_advisory: bool,
    ceiling: int | None,
    pool_specs: list[PoolSpec],
    workflow_cap: Limits | None,
    run_specs: list[tuple[BudgetPolicy, int, bool]],
    agent_first: bool,
    ops: list[tuple[Any, ...]],
) -> None:
    """Sets the tenant up on both sides, then runs `ops`, comparing after every step."""
    tag = uuid.uuid4().hex[:10]
    tenant = f"oracle-{tag}"  # a tenant of its own: nothing of another example is visible
    ceilings = HostCeilings(max_tokens=ceiling)
    oracle = BudgetOracle(host_advisory=host_advisory, ceilings=ceilings, default_ttl_seconds=300)
    example = Example(
        harness, _service(harness, tenant, host_advisory, ceiling), oracle, tenant, tag, []
    )
    await _setup(example, pool_specs, workflow_cap, run_specs, agent_first)
    for step, op in enumerate(ops):
        kind = op[0]
        if kind == "expire":
            await example.expire(op[1], op[2])
        elif kind == "sweep":
            await example.sweep()
        elif kind == "new_day":
            await example.new_day()
        elif kind == "repool":
            await example.repool(op[1], op[2], op[3])
        elif kind == "batch":
            calls = _batch_calls(example, op[1])
            if DECISIONS is not None and len(calls) > 1:
                await example.issue_batch(calls)
            else:  # current main: the same calls one at a time
                for one in calls:
                    await example.issue(one)
        elif kind == "checks":
            checks = [c for sub in op[1] if (c := _call_of(example, sub)) is not None]
            await example.issue_checks(checks)
        else:
            single = _call_of(example, op)
            if single is None:
                continue
            await example.issue(single)
        await example.compare_rows(f"step {step} {op}")


# Cases worth naming, each run through the same comparison (they pass on current main; some
# only mean something where the engine is present).
_POLICY = BudgetPolicy(max_tokens=20, max_tool_calls=4, on_exhaustion=OnExhaustion.INTERRUPT)
_RESERVE = ("reserve", 0, (5, 0, 1, 0), False, "gpt-4o", 0)
_SCENARIOS: dict[str, list[tuple[Any, ...]]] = {
    # engine.md rule 1: a replay writes nothing, even where its run has an overdue hold.
    "a replay writes nothing": [_RESERVE, _RESERVE, ("expire", 0, False), ("again", 0)],
    # Rule 3: the expiries a refused item found stay (current main rolls them back).
    "refusals keep the expiries they found": [
        _RESERVE,
        ("expire", 0, False),
        ("consume", 12, (1, 0, 0, 0), "gpt-4o", False),
        ("release", 12, False),
    ],
    # Rules 1 and 4 within one batch: a twin replays, a reused id is refused, a hold reserved
    # earlier in the batch is consumed and released later in it.
    "one batch": [
        (
            "batch",
            [
                _RESERVE,
                ("twin", 0),
                ("reused", 0),
                ("consume_new", 0, (7, 0, 1, 0), "gpt-4o"),
                ("release_new", 0),
                ("reserve", 1, (30, 0, 0, 0), True, "gpt-4o", 0),
                ("missing", (1, 0, 0, 0)),
            ],
        )
    ],
    # A day passes on a day-window pool: holds settle on yesterday's row, usage goes to today's.
    "a new window": [
        _RESERVE,
        ("new_day",),
        ("unreserved", 0, (3, 0, 0, 0), "gpt-4o"),
        ("release", 0, False),
        ("reserve", 1, (25, 0, 0, 0), False, "gpt-4o", 0),
    ],
    # Rule 1 across midnight: a twin of yesterday's call replays and writes nothing, not even
    # a row for the new window.
    "a replay in a new window writes nothing": [_RESERVE, ("new_day",), ("again", 0)],
    # Each window numbers its own events: the new window's row starts again at seq 1, so
    # yesterday's threshold crossing and today's are both seq 1, each on its own window.
    "each window's events": [
        ("unreserved", 0, (50, 0, 0, 0), "gpt-4o"),
        ("new_day",),
        ("unreserved", 1, (50, 0, 0, 0), "gpt-4o"),
    ],
    # A breach interrupts; Resume raises the limit; Close releases what is still held.
    "interrupt, resume, close": [
        ("unreserved", 0, (21, 0, 0, 0), "gpt-4o"),
        _RESERVE,
        ("resume", 0, (10, 0, 0, 0)),
        _RESERVE,
        ("close", 0, RunOutcome.SUCCEEDED),
        ("again", 4),
    ],
    # The lifecycle functions of the engine (budget.close_run_v1, resume_run_v1, expire_run_v1):
    # CloseRun expires the overdue hold, releases the other from the run and its pool, a twin
    # replays, closing again writes only its ledger-free reply, the sweeper finds nothing.
    "close ends every hold": [
        _RESERVE,
        ("reserve", 0, (3, 0, 0, 0), False, "gpt-4o", 0),
        ("expire", 0, False),
        ("close", 0, RunOutcome.FAILED),
        ("again", 2),
        ("close", 0, RunOutcome.SUCCEEDED),
        ("sweep",),
    ],
    # The sweeper expires holds drawn on yesterday's window and opens today's row.
    "the sweeper expires on yesterday's window": [
        _RESERVE,
        ("reserve", 1, (4, 0, 0, 0), False, "gpt-4o", 0),
        ("new_day",),
        ("expire", 0, True),
        ("expire", 1, True),
        ("sweep",),
        ("reserve", 1, (25, 0, 0, 0), False, "gpt-4o", 0),
    ],
    # ResumeRun expires the run's overdue hold under its lock, then raises two limits.
    "resume expires first": [
        _RESERVE,
        ("unreserved", 0, (21, 0, 0, 0), "gpt-4o"),
        ("expire", 0, False),
        ("resume", 0, (10, 0, 2, 0)),
        ("again", 2),
        ("close", 0, RunOutcome.SUCCEEDED),
    ],
    # A refused ResumeRun writes nothing, not even the expiry its lock found.
    "a refused resume writes nothing": [
        _RESERVE,
        ("expire", 0, False),
        ("resume", 2, (5, 0, 0, 0)),
        ("sweep",),
    ],
    # The host ceiling clamps a resumed limit and binds it (budget.reserved says so).
    "resume clamped by the host ceiling": [
        ("unreserved", 0, (21, 0, 0, 0), "gpt-4o"),
        ("resume", 0, (10, 0, 0, 0)),
        ("unreserved", 0, (5, 0, 0, 0), "gpt-4o"),
        ("resume", 0, (10, 0, 0, 0)),
    ],
}
_SCENARIO_CEILING = {"resume clamped by the host ceiling": 25}


# Scenarios whose pool also bounds model calls.
_SCENARIO_MODEL_CALLS = {"model calls per window": 2}
_SCENARIOS["model calls per window"] = [
    _RESERVE,
    ("reserve", 1, (0, 0, 1, 0), False, "", 0),  # a tool call: no model call
    ("reserve", 1, (5, 0, 0, 0), False, "gpt-4o", 0),
    ("reserve", 0, (5, 0, 0, 0), False, "gpt-4o", 0),  # held: 2 of 2 model calls
    ("release", 0, False),
    ("consume", 2, (0, 0, 1, 0), "", False),  # settling a model call's hold records it
    ("unreserved", 0, (1, 0, 0, 0), "gpt-4o"),
    ("reserve", 0, (5, 0, 0, 0), False, "gpt-4o", 0),  # exhausted: 2 of 2 consumed
    ("check", 1, (1, 0, 0, 0), "gpt-4o"),
    ("expire", 1, True),
    ("new_day",),
    ("reserve", 1, (5, 0, 0, 0), False, "gpt-4o", 0),
]


# Batches touching three runs and ending three holds at once, compared with the model (the
# named cases have two runs).
_THREE_RUN_BATCHES = [
    ("batch", [("reserve", n, (3, 0, 1, 0), False, "gpt-4o", 0) for n in range(3)]),
    ("batch", [("consume", 0, (2, 0, 1, 0), "gpt-4o", False) for _ in range(3)]),
    ("batch", [("reserve", n, (4, 0, 0, 0), False, "gpt-4o", 0) for n in (0, 1, 2, 0)]),
    ("batch", [("release", 0, False), ("release", 2, False), ("release", 4, False)]),
    ("batch", [("unreserved", n, (1, 0, 0, 0), "gpt-4o") for n in range(3)]),
]


async def test_batches_of_three_runs_and_three_ended_holds(harness: Harness) -> None:
    pool = (Window.DAY, (60, None, None, None), Enforcement.HARD, None)
    runs = [(_POLICY, 1, False), (_POLICY, 2, True), (_POLICY, 1, True)]
    await run_example(harness, False, None, [pool], None, runs, False, _THREE_RUN_BATCHES)


@pytest.mark.parametrize("name", list(_SCENARIOS))
async def test_named_cases(harness: Harness, name: str) -> None:
    pool = (Window.DAY, (60, None, None, None), Enforcement.HARD, _SCENARIO_MODEL_CALLS.get(name))
    runs = [(_POLICY, 1, False), (_POLICY, 2, True)]
    ceiling = _SCENARIO_CEILING.get(name)
    await run_example(harness, False, ceiling, [pool], None, runs, False, _SCENARIOS[name])
