"""Budget SQL of a call's changes: one statement writes the run, pools, holds, ledger, events."""

from __future__ import annotations

import json

import asyncpg

from budget_service.domain.records import RunChanges
from budget_service.store import rows

# Where WatchRunEvents listens; the payload is JSON [tenant, run_id, last_seq].
EVENTS_CHANNEL = "ration_budget_events"


def _record_type(prefix: str, sql_type: str = "bigint") -> str:
    return ", ".join(f"{prefix}_{s} {sql_type}" for s in rows.SUFFIXES)


def _set(prefix: str) -> str:
    return ", ".join(f"{prefix}_{s} = x.{prefix}_{s}" for s in rows.SUFFIXES)


# Everything a call changes, in one statement driven by one JSON document. Each hold transition
# is guarded by state = 'open' and counted, so a hold can never end twice. The NOTIFY's result
# is cast to text: Citus cannot return a void column from the worker the statement runs on (a
# NOTIFY sent there never reaches the coordinator's listeners; on Citus the event hub polls).
_WRITE = f"""
WITH doc AS (SELECT $3::jsonb AS d),
run_upd AS (
    UPDATE budget.runs r SET
        state = x.state, outcome = x.outcome, {_set("max")}, binding = x.binding,
        policy_version = x.policy_version, {_set("consumed")}, {_set("held")},
        crossed = x.crossed, exhausted = x.exhausted, breached = x.breached,
        stopped_dimension = x.stopped_dimension, stopped_limit = x.stopped_limit,
        stopped_consumed = x.stopped_consumed, stopped_observed = x.stopped_observed,
        stopped_scope = x.stopped_scope, stopped_scope_id = x.stopped_scope_id,
        next_seq = x.next_seq, advisory_refusals = r.advisory_refusals + x.advisory_refusals,
        updated_at = now()
    FROM doc, jsonb_to_recordset(doc.d -> 'runs') AS x(
        state text, outcome text, {_record_type("max")}, binding jsonb, policy_version integer,
        {_record_type("consumed")}, {_record_type("held")}, crossed text[], exhausted text[],
        breached text[], stopped_dimension text, stopped_limit bigint, stopped_consumed bigint,
        stopped_observed bigint, stopped_scope text, stopped_scope_id text, next_seq bigint,
        advisory_refusals bigint)
    WHERE r.tenant_id = $1 AND r.run_id = $2
    RETURNING 1
), pool_upd AS (
    UPDATE budget.pool_balances p SET {_set("consumed")}, {_set("held")},
        consumed_model_calls = x.consumed_model_calls, held_model_calls = x.held_model_calls
    FROM doc, jsonb_to_recordset(doc.d -> 'pools') AS x(
        scope text, scope_id text, window_start timestamptz,
        {_record_type("consumed")}, {_record_type("held")}, consumed_model_calls bigint,
        held_model_calls bigint)
    WHERE p.tenant_id = $1 AND p.scope = x.scope AND p.scope_id = x.scope_id
      AND p.window_start = x.window_start
    RETURNING 1
), hold_ins AS (
    INSERT INTO budget.holds (
        tenant_id, run_id, reservation_id, model, {rows.columns("requested")},
        {rows.columns("granted")}, pool_scopes, pool_scope_ids, pool_windows, state,
        policy_version, created_at, expires_at)
    SELECT $1, $2, x.reservation_id, x.model, {rows.columns("x.requested")},
        {rows.columns("x.granted")}, x.pool_scopes, x.pool_scope_ids, x.pool_windows, 'open',
        x.policy_version, now(), x.expires_at
    FROM doc, jsonb_to_recordset(doc.d -> 'holds') AS x(
        reservation_id text, model text, {_record_type("requested")},
        {_record_type("granted")}, pool_scopes text[], pool_scope_ids text[],
        pool_windows timestamptz[], policy_version integer, expires_at timestamptz)
    RETURNING 1
), hold_end AS (
    UPDATE budget.holds h SET state = x.state, ended_at = now()
    FROM doc, jsonb_to_recordset(doc.d -> 'ended') AS x(reservation_id text, state text)
    WHERE h.tenant_id = $1 AND h.run_id = $2 AND h.reservation_id = x.reservation_id
      AND h.state = 'open'
    RETURNING 1
), ledger_ins AS (
    INSERT INTO budget.ledger (
        tenant_id, run_id, request_id, decision, reason, reservation_id, model, policy_version,
        {rows.columns("consumed")}, {rows.columns("held")}, consumed_model_calls,
        held_model_calls, pools, detail)
    SELECT $1, $2, doc.d ->> 'request_id', x.decision, x.reason, x.reservation_id, x.model,
        x.policy_version,
        {rows.columns("x.consumed")}, {rows.columns("x.held")}, x.consumed_model_calls,
        x.held_model_calls, x.pools, x.detail
    FROM doc, jsonb_to_recordset(doc.d -> 'ledger') AS x(
        i integer, decision text, reason text, reservation_id text, model text,
        policy_version integer, {_record_type("consumed")}, {_record_type("held")},
        consumed_model_calls bigint, held_model_calls bigint, pools jsonb, detail jsonb)
    ORDER BY x.i
    RETURNING 1
), events_ins AS (
    INSERT INTO budget.events (tenant_id, run_id, seq, type, payload_json, created_at)
    SELECT $1, $2, x.seq, x.type, x.payload, now()
    FROM doc, jsonb_to_recordset(doc.d -> 'events') AS x(seq bigint, type text, payload text)
    RETURNING seq
), notified AS (
    SELECT pg_notify('{EVENTS_CHANNEL}', json_build_array($1::text, $2::text, max(seq))::text)::text
    FROM events_ins HAVING count(*) > 0
)
SELECT (SELECT count(*) FROM run_upd) AS runs, (SELECT count(*) FROM pool_upd) AS pools,
       (SELECT count(*) FROM hold_ins) AS holds, (SELECT count(*) FROM hold_end) AS ended,
       (SELECT count(*) FROM ledger_ins) AS ledger, (SELECT count(*) FROM notified) AS notified
"""


class WriteConflict(RuntimeError):
    """A write did not touch the rows it had locked: a bug, never a client error; rolls back."""


async def write(conn: asyncpg.Connection, tenant: str, run_id: str, changes: RunChanges) -> None:
    """Writes the run, pools, holds, ledger and events of one call, and notifies watchers."""
    doc = {
        "request_id": changes.request_id,
        "runs": [rows.run_doc(changes.run, changes.advisory_refusals)] if changes.run else [],
        "pools": [rows.pool_doc(p) for p in changes.pools.values()],
        "holds": [rows.reservation_doc(changes.new_reservation, changes.run.policy_version)]
        if changes.new_reservation and changes.run
        else [],
        "ended": [{"reservation_id": r, "state": s.value} for r, s in changes.ended.items()],
        "ledger": [rows.ledger_doc(i, e) for i, e in enumerate(changes.ledger)],
        "events": [
            {"seq": changes.first_seq + i, "type": e.event_type, "payload": e.payload_json()}
            for i, e in enumerate(changes.events)
        ],
    }
    counts = await conn.fetchrow(_WRITE, tenant, run_id, json.dumps(doc))
    expected = {
        "runs": 1 if changes.run else 0,
        "pools": len(changes.pools),
        "ended": len(changes.ended),
    }
    actual = {k: counts[k] for k in expected}
    if actual != expected:
        raise WriteConflict(f"write touched {actual}, expected {expected}")
