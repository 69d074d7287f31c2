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
    PoolKey,
    RunRecord,
)
from budget_service.domain.run_state import (
    BalanceRef,
    Breach,
    RunOutcome,
    RunState,
    RunStatus,
)

Row = Mapping[str, Any]
# Column name suffixes of the four dimensions, in Dimension order.
SUFFIXES = tuple(d.field_name for d in Dimension)


def amounts_of(row: Row, prefix: str) -> dict[Dimension, int]:
    return {d: int(row[f"{prefix}_{d.field_name}"]) for d in Dimension}


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


def pool_key_of(scope: str, scope_id: str, window_start: datetime) -> PoolKey:
    return PoolKey(BalanceRef(Scope(scope), scope_id), window_start)


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
