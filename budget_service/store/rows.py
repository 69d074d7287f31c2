"""Mapping between database rows (and write documents) and the budget domain records."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from budget_service.domain.policy import (
    BudgetLimits,
    BudgetPolicy,
    Dimension,
    EffectiveBudget,
    Enforcement,
    ModelLists,
    OnExhaustion,
    Scope,
    ScopeBudget,
    ScopeBudgetKind,
    Window,
)
from budget_service.domain.records import (
    LedgerEntry,
    PoolBalance,
    PoolKey,
    ReservationRecord,
    RunRecord,
)
from budget_service.domain.run_state import (
    Amounts,
    BalanceRef,
    Breach,
    ReservationState,
    RunOutcome,
    RunState,
    RunStatus,
)

Row = Mapping[str, Any]
# Column name suffixes of the four dimensions, in Dimension order.
SUFFIXES = tuple(d.field_name for d in Dimension)


def columns(prefix: str) -> str:
    return ", ".join(f"{prefix}_{s}" for s in SUFFIXES)


def amounts_of(row: Row, prefix: str) -> dict[Dimension, int]:
    return {d: int(row[f"{prefix}_{d.field_name}"]) for d in Dimension}


def amounts_doc(values: Amounts, prefix: str) -> dict[str, int]:
    return {f"{prefix}_{d.field_name}": int(values.get(d, 0)) for d in Dimension}


def limits_of(row: Row) -> BudgetLimits:
    return BudgetLimits(
        row["max_tokens"], row["max_cost_nanos"], row["max_tool_calls"], row["max_retries"]
    )


def _dims(values: Sequence[str]) -> frozenset[Dimension]:
    return frozenset(Dimension(v) for v in values)


def _model_lists(text: str) -> tuple[ModelLists, ...]:
    return tuple(
        ModelLists(
            Scope(e["scope"]),
            None if e["allow"] is None else tuple(e["allow"]),
            tuple(e["deny"]),
        )
        for e in json.loads(text)
    )


def model_lists_json(lists: Sequence[ModelLists]) -> str:
    return json.dumps(
        [
            {
                "scope": e.scope.value,
                "allow": None if e.allow is None else list(e.allow),
                "deny": list(e.deny),
            }
            for e in lists
        ]
    )


def binding_json(budget: EffectiveBudget) -> dict[str, str]:
    return {d.value: source for d, source in budget.binding.items()}


def tags_of(value: Any) -> tuple[tuple[str, str], ...]:
    """A run's tags column (jsonb: text from asyncpg, a dict inside a JSON document)."""
    if not value:
        return ()
    found = json.loads(value) if isinstance(value, str) else value
    return tuple(sorted((str(k), str(v)) for k, v in found.items()))


def run_of(row: Row) -> RunRecord:
    stopped = None
    if row["stopped_dimension"] is not None:
        stopped = Breach(
            Dimension(row["stopped_dimension"]),
            row["stopped_limit"],
            row["stopped_consumed"],
            row["stopped_observed"],
            BalanceRef(Scope(row["stopped_scope"]), row["stopped_scope_id"]),
        )
    binding = {Dimension(k): v for k, v in json.loads(row["binding"]).items()}
    budget = EffectiveBudget(
        threshold_percent=row["threshold_percent"],
        on_exhaustion=OnExhaustion(row["on_exhaustion"]),
        binding=binding,
        model_lists=_model_lists(row["model_lists"]),
    ).with_limits({d: limits_of(row).limit(d) for d in Dimension})
    status = RunStatus(
        RunState(row["state"]),
        _dims(row["crossed"]),
        _dims(row["exhausted"]),
        _dims(row["breached"]),
        stopped,
    )
    pools = tuple(
        BalanceRef(Scope(s), i)
        for s, i in zip(row["pool_scopes"], row["pool_scope_ids"], strict=True)
    )
    return RunRecord(
        run_id=row["run_id"],
        project_id=row["project_id"],
        workflow_id=row["workflow_id"],
        agent_id=row["agent_id"],
        budget=budget,
        status=status,
        consumed=amounts_of(row, "consumed"),
        held=amounts_of(row, "held"),
        pools=pools,
        scope_advisory=row["scope_advisory"],
        policy_version=row["policy_version"],
        next_seq=row["next_seq"],
        open_fingerprint=bytes(row["open_fingerprint"]),
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        outcome=RunOutcome(row["outcome"]) if row["outcome"] else None,
        advisory_refusals=row["advisory_refusals"],
        end_user_id=row.get("end_user_id") or "",
        api_key_id=row.get("api_key_id") or "",
        tags=tags_of(row.get("tags")),
    )


def run_doc(run: RunRecord, advisory_refusals: int = 0) -> dict[str, Any]:
    """The mutable columns of a run, as the write statement's `run` object."""
    status, budget, stopped = run.status, run.budget, run.status.stopped_by
    return {
        "state": status.state.value,
        "outcome": run.outcome.value if run.outcome else None,
        **{f"max_{d.field_name}": budget.limit(d) for d in Dimension},
        "binding": binding_json(budget),
        "policy_version": run.policy_version,
        **amounts_doc(run.consumed, "consumed"),
        **amounts_doc(run.held, "held"),
        "crossed": sorted(status.crossed),
        "exhausted": sorted(status.exhausted),
        "breached": sorted(status.breached),
        "stopped_dimension": stopped.dimension.value if stopped else None,
        "stopped_limit": stopped.limit if stopped else None,
        "stopped_consumed": stopped.consumed if stopped else None,
        "stopped_observed": stopped.observed if stopped else None,
        "stopped_scope": stopped.balance.scope.value if stopped else None,
        "stopped_scope_id": stopped.balance.scope_id if stopped else None,
        "next_seq": run.next_seq,
        "advisory_refusals": advisory_refusals,
    }


# Hold columns in a fixed order: holds come back both as rows and as ROW(...) tuples.
HOLD_COLUMNS = (
    "reservation_id, run_id, model, "
    f"{columns('requested')}, {columns('granted')}, "
    "state, pool_scopes, pool_scope_ids, pool_windows, created_at, expires_at, granted_model_calls"
)


def reservation_of(values: Sequence[Any]) -> ReservationRecord:
    """A hold from a row or tuple in HOLD_COLUMNS order."""
    requested = dict(zip(Dimension, values[3:7], strict=True))
    granted = dict(zip(Dimension, values[7:11], strict=True))
    pools = tuple(
        PoolKey(BalanceRef(Scope(s), i), w)
        for s, i, w in zip(values[12], values[13], values[14], strict=True)
    )
    return ReservationRecord(
        reservation_id=values[0],
        run_id=values[1],
        model=values[2],
        requested=requested,
        granted=granted,
        state=ReservationState(values[11]),
        pools=pools,
        created_at=values[15],
        expires_at=values[16],
        model_calls=values[17],
    )


def reservation_doc(reservation: ReservationRecord, policy_version: int) -> dict[str, Any]:
    return {
        "reservation_id": reservation.reservation_id,
        "model": reservation.model,
        **amounts_doc(reservation.requested, "requested"),
        **amounts_doc(reservation.granted, "granted"),
        **pool_arrays(reservation.pools),
        "policy_version": policy_version,
        "expires_at": reservation.expires_at.isoformat(),
    }


def pool_arrays(keys: Sequence[PoolKey]) -> dict[str, list[str]]:
    return {
        "pool_scopes": [k.ref.scope.value for k in keys],
        "pool_scope_ids": [k.ref.scope_id for k in keys],
        "pool_windows": [k.window_start.isoformat() for k in keys],
    }


def pool_key_of(scope: str, scope_id: str, window_start: datetime) -> PoolKey:
    return PoolKey(BalanceRef(Scope(scope), scope_id), window_start)


def pool_doc(pool: PoolBalance) -> dict[str, Any]:
    key = pool.key
    return {
        "scope": key.ref.scope.value,
        "scope_id": key.ref.scope_id,
        "window_start": key.window_start.isoformat(),
        **amounts_doc(pool.consumed, "consumed"),
        **amounts_doc(pool.held, "held"),
        "consumed_model_calls": pool.consumed_model_calls,
        "held_model_calls": pool.held_model_calls,
    }


def ledger_doc(index: int, entry: LedgerEntry) -> dict[str, Any]:
    pools = [
        {
            "scope": k.ref.scope.value,
            "scope_id": k.ref.scope_id,
            "window_start": k.window_start.isoformat(),
        }
        for k in entry.pools
    ]
    return {
        "i": index,
        "decision": entry.decision,
        "reason": entry.reason,
        "reservation_id": entry.reservation_id,
        "model": entry.model,
        "policy_version": entry.policy_version,
        **amounts_doc(entry.consumed, "consumed"),
        **amounts_doc(entry.held, "held"),
        "consumed_model_calls": entry.consumed_model_calls,
        "held_model_calls": entry.held_model_calls,
        "pools": pools,
        "detail": dict(entry.detail) if entry.detail is not None else None,
    }


def scope_budget_of(row: Row) -> ScopeBudget:
    """A scope budget from its row (or from a JSON row of budget.pool_gauges())."""
    allow = row["model_allow"]
    policy = BudgetPolicy(
        max_tokens=row["max_tokens"],
        max_cost_nanos=row["max_cost_nanos"],
        max_tool_calls=row["max_tool_calls"],
        max_retries=row["max_retries"],
        model_allow=None if allow is None else tuple(allow),
        model_deny=tuple(row["model_deny"]),
        threshold_percent=row["threshold_percent"],
        on_exhaustion=OnExhaustion(row["on_exhaustion"]),
    )
    return ScopeBudget(
        Scope(row["scope"]),
        row["scope_id"],
        ScopeBudgetKind(row["kind"]),
        policy,
        Window(row["window_kind"]),
        Enforcement(row["enforcement"]),
        row["model_match"] or "",
        row.get("max_model_calls"),
    )
