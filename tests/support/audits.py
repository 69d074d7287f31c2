"""The audits that end every fault and soak test, read back from the tables: the budget ledger,
balances, events and holds; memory revision chains and manifest bytes."""

from __future__ import annotations

import asyncio
import json
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import asyncpg

from tests.support.manifests import materialise

# Column suffixes of the four budget dimensions, and their names in ledger `resume` details.
SUFFIXES = ("tokens", "cost_nanos", "tool_calls", "retries")
# Pools (and the holds and ledger rows on them) also count model calls; runs never do.
POOL_SUFFIXES = (*SUFFIXES, "model_calls")
DIMENSION_NAMES = {
    "tokens": "tokens",
    "cost": "cost_nanos",
    "toolCalls": "tool_calls",
    "retries": "retries",
}


async def assert_ledger_matches_balances(db: asyncpg.Connection) -> None:
    """Summing the ledger's deltas gives every run's and every pool's consumed and held, and
    held equals the open holds; no hold ended twice."""
    suffixes = ("tokens", "cost_nanos", "tool_calls", "retries")
    cols = ", ".join(f"sum(consumed_{s}) AS c_{s}, sum(held_{s}) AS h_{s}" for s in suffixes)
    runs = await db.fetch("SELECT * FROM budget.runs")
    for run in runs:
        totals = await db.fetchrow(
            f"SELECT {cols} FROM budget.ledger WHERE tenant_id = $1 AND run_id = $2",
            run["tenant_id"],
            run["run_id"],
        )
        reservations = await db.fetchrow(
            "SELECT "
            + ", ".join(f"coalesce(sum(granted_{s}), 0) AS g_{s}" for s in suffixes)
            + " FROM budget.holds WHERE tenant_id = $1 AND run_id = $2 AND state = 'open'",
            run["tenant_id"],
            run["run_id"],
        )
        for s in suffixes:
            assert (totals[f"c_{s}"] or 0) == run[f"consumed_{s}"], (run["run_id"], s)
            assert (totals[f"h_{s}"] or 0) == run[f"held_{s}"], (run["run_id"], s)
            assert reservations[f"g_{s}"] == run[f"held_{s}"], (run["run_id"], s)
    pool_suffixes = POOL_SUFFIXES
    pool_cols = ", ".join(
        f"sum(consumed_{s}) AS c_{s}, sum(held_{s}) AS h_{s}" for s in pool_suffixes
    )
    open_sums = ", ".join(f"coalesce(sum(h.granted_{s}), 0) AS g_{s}" for s in pool_suffixes)
    pools = await db.fetch("SELECT * FROM budget.pool_balances")
    for pool in pools:
        totals = await db.fetchrow(
            f"SELECT {pool_cols} FROM budget.ledger l"
            " WHERE l.tenant_id = $1 AND l.pools @> $2::jsonb",
            pool["tenant_id"],
            json.dumps(
                [
                    {
                        "scope": pool["scope"],
                        "scope_id": pool["scope_id"],
                        "window_start": pool["window_start"].isoformat(),
                    }
                ]
            ),
        )
        # A pool's held is its open holds (those past expiry too, until they are marked).
        holding = await db.fetchrow(
            f"SELECT {open_sums} FROM budget.holds h,"
            " unnest(h.pool_scopes, h.pool_scope_ids, h.pool_windows) AS k(scope, id, w)"
            " WHERE h.tenant_id = $1 AND h.state = 'open'"
            " AND k.scope = $2 AND k.id = $3 AND k.w = $4",
            pool["tenant_id"],
            pool["scope"],
            pool["scope_id"],
            pool["window_start"],
        )
        for s in pool_suffixes:
            assert (totals[f"c_{s}"] or 0) == pool[f"consumed_{s}"], (pool["scope_id"], s)
            assert (totals[f"h_{s}"] or 0) == pool[f"held_{s}"], (pool["scope_id"], s)
            assert holding[f"g_{s}"] == pool[f"held_{s}"], (pool["scope_id"], s)
    twice = await db.fetchval(
        "SELECT count(*) FROM (SELECT reservation_id FROM budget.ledger"
        " WHERE decision IN ('consume', 'release', 'expire') AND reservation_id IS NOT NULL"
        " AND (held_tokens < 0 OR held_cost_nanos < 0 OR held_tool_calls < 0"
        " OR held_retries < 0 OR held_model_calls < 0 OR decision <> 'consume')"
        " GROUP BY tenant_id, run_id, reservation_id HAVING count(*) > 1) t"
    )
    assert twice == 0, "a hold ended more than once"


# --- budget audit ---------------------------------------------------------------------------


@dataclass
class _Balance:
    """One run or pool row while the ledger is replayed."""

    limits: dict[str, int | None]
    consumed: dict[str, int] = field(default_factory=lambda: dict.fromkeys(POOL_SUFFIXES, 0))
    open_reservations: dict[str, tuple[dict[str, int], datetime]] = field(default_factory=dict)


def _pool_keys(pools_json: Any) -> list[tuple[str, str, str]]:
    pools = json.loads(pools_json) if isinstance(pools_json, str) else pools_json
    return [
        (p["scope"], p["scope_id"], datetime.fromisoformat(p["window_start"]).isoformat())
        for p in pools or []
    ]


async def audit_budget(conn: asyncpg.Connection) -> dict[str, int]:
    """Everything DESIGN 3.7 promises, read back from the tables after a load:

    - the ledger's deltas sum to every run's and every pool's consumed and held, and held equals
      the open holds (assert_ledger_matches_balances);
    - every run's events are numbered 1..n without gaps, and next_seq is n + 1;
    - every hold was granted by exactly one ledger row, and ended at most once: an ended hold by
      exactly one ledger row whose decision matches its state, an open one by none;
    - replaying the ledger in order, every grant left consumed + held <= limit, in every
      dimension it holds, on the run and on every pool it drew on (holds past expires_at at
      that instant not counted, as the service does), with run limits as they were then (later
      ResumeRun deltas taken back).

    Runs judged in advisory mode are skipped by the grant check (they never refuse).
    Returns counts, for the caller's sanity checks."""
    # One snapshot for every read: the services' sweepers may still be ending holds.
    async with conn.transaction(isolation="repeatable_read", readonly=True):
        return await _audit_budget(conn)


async def _audit_budget(conn: asyncpg.Connection) -> dict[str, int]:
    await assert_ledger_matches_balances(conn)

    gaps = await conn.fetch(
        "SELECT r.run_id, r.next_seq, count(e.seq) AS n, coalesce(min(e.seq), 1) AS lo,"
        " coalesce(max(e.seq), 0) AS hi FROM budget.runs r LEFT JOIN budget.events e"
        " ON e.tenant_id = r.tenant_id AND e.run_id = r.run_id"
        " GROUP BY r.tenant_id, r.run_id, r.next_seq"
        " HAVING count(e.seq) <> coalesce(max(e.seq), 0) OR coalesce(min(e.seq), 1) <> 1"
        " OR r.next_seq <> coalesce(max(e.seq), 0) + 1"
    )
    assert not gaps, f"event sequences with gaps: {[dict(g) for g in gaps][:5]}"

    runs = {(r["tenant_id"], r["run_id"]): r for r in await conn.fetch("SELECT * FROM budget.runs")}
    reservations = {
        (h["tenant_id"], h["run_id"], h["reservation_id"]): h
        for h in await conn.fetch("SELECT * FROM budget.holds")
    }
    ledger = await conn.fetch("SELECT * FROM budget.ledger ORDER BY entry_id")
    scope_limits = {
        (s["tenant_id"], s["scope"], s["scope_id"]): {x: s[f"max_{x}"] for x in POOL_SUFFIXES}
        for s in await conn.fetch("SELECT * FROM budget.scope_budgets WHERE kind = 'pooled'")
    }

    grants: dict[tuple[str, str, str], int] = defaultdict(int)
    ends: dict[tuple[str, str, str], list[str]] = defaultdict(list)
    for row in ledger:
        if row["reservation_id"] is None:
            continue
        key = (row["tenant_id"], row["run_id"], row["reservation_id"])
        if row["decision"] == "grant":
            grants[key] += 1
            reservation = reservations[key]
            assert all(row[f"held_{s}"] == reservation[f"granted_{s}"] for s in POOL_SUFFIXES), key
        elif row["decision"] in ("consume", "release", "expire") and any(
            row[f"held_{s}"] < 0 for s in POOL_SUFFIXES
        ):
            ends[key].append(row["decision"])
    ending = {"consumed": "consume", "released": "release", "expired": "expire"}
    for key, reservation in reservations.items():
        assert grants[key] == 1, f"hold {key} granted {grants[key]} times"
        if reservation["state"] == "open":
            assert ends[key] == [], f"open hold {key} has ledger ends {ends[key]}"
            assert reservation["ended_at"] is None, key
        else:
            assert ends[key] == [ending[reservation["state"]]], (
                f"hold {key}: {reservation['state']} {ends[key]}"
            )
    assert set(grants) <= set(reservations), "a grant row names no hold"

    # Run limits at each ledger row: the final limit minus the ResumeRun deltas still to come.
    later_delta: dict[tuple[str, str], dict[str, int]] = defaultdict(
        lambda: dict.fromkeys(SUFFIXES, 0)
    )
    limit_then: dict[int, dict[str, int | None]] = {}
    for row in reversed(ledger):
        run_key = (row["tenant_id"], row["run_id"])
        run = runs[run_key]
        if row["decision"] == "grant":
            limit_then[row["entry_id"]] = {
                s: None if run[f"max_{s}"] is None else run[f"max_{s}"] - later_delta[run_key][s]
                for s in SUFFIXES
            }
        if row["decision"] == "resume":
            detail = json.loads(row["detail"]) if isinstance(row["detail"], str) else row["detail"]
            for name, amount in (detail or {}).get("delta", {}).items():
                later_delta[run_key][DIMENSION_NAMES[name]] += amount

    balances: dict[Any, _Balance] = {}

    def balance(key: Any, limits: dict[str, int | None]) -> _Balance:
        if key not in balances:
            balances[key] = _Balance(limits)
        return balances[key]

    checked = 0
    for row in ledger:
        tenant, run_id = row["tenant_id"], row["run_id"]
        run = runs[(tenant, run_id)]
        keys: list[tuple[Any, dict[str, int | None]]] = [
            (("run", tenant, run_id), limit_then.get(row["entry_id"], {}))
        ]
        for scope, scope_id, window in _pool_keys(row["pools"]):
            limits = scope_limits.get((tenant, scope, scope_id), dict.fromkeys(POOL_SUFFIXES))
            keys.append((("pool", tenant, scope, scope_id, window), limits))
        reservation_key = (tenant, run_id, row["reservation_id"])
        for key, limits in keys:
            b = balance(key, limits)
            if row["decision"] == "grant":
                reservation = reservations[reservation_key]
                granted = {s: reservation[f"granted_{s}"] for s in POOL_SUFFIXES}
                if not run["scope_advisory"]:
                    now = reservation["created_at"]
                    for s in POOL_SUFFIXES:  # a run's limits have no model_calls
                        limit = limits.get(s)
                        # A grant adds nothing to a dimension it holds none of (an earlier
                        # overrun may have left that one over already: recorded usage).
                        if limit is None or granted[s] == 0:
                            continue
                        held = sum(
                            amounts[s]
                            for amounts, expires in b.open_reservations.values()
                            if expires > now
                        )
                        assert b.consumed[s] + held + granted[s] <= limit, (
                            f"grant {row['entry_id']} on {key} {s}: consumed {b.consumed[s]}"
                            f" + held {held} + granted {granted[s]} > limit {limit}"
                        )
                    checked += 1
                b.open_reservations[row["reservation_id"]] = (granted, reservation["expires_at"])
            elif row["reservation_id"] is not None and any(
                row[f"held_{s}"] < 0 for s in POOL_SUFFIXES
            ):
                b.open_reservations.pop(row["reservation_id"], None)
            for s in POOL_SUFFIXES:
                b.consumed[s] += row[f"consumed_{s}"]
    return {
        "runs": len(runs),
        "holds": len(reservations),
        "ledger_rows": len(ledger),
        "grants_checked": checked,
    }


async def wait_for_no_overdue_reservations(conn: asyncpg.Connection, within: float = 30) -> None:
    """Until the sweeper has marked every hold past its expiry (bounded wait for a condition)."""
    deadline = time.monotonic() + within
    query = "SELECT count(*) FROM budget.holds WHERE state = 'open' AND expires_at <= now()"
    while await conn.fetchval(query):
        assert time.monotonic() < deadline, "overdue holds were never marked expired"
        await asyncio.sleep(0.1)


# --- memory audit ----------------------------------------------------------------------------


async def audit_memory(
    conn: asyncpg.Connection,
    head_bytes: Callable[[str], Awaitable[tuple[int, int]]],
    *,
    sample_revisions: int = 25,
) -> dict[str, int]:
    """Per memory: revisions 1..head without gaps and head_revision on the memory row; each
    revision's change_count equals its recorded changes; manifest item ranges of an entry do not
    overlap and at most one is open; GetCapacity at the head (via `head_bytes(ref)` →
    (revision, manifest_bytes)) and the stored bytes of the head and of sampled past revisions
    equal the RFC 8785 length of the manifest materialised from the store."""
    async with conn.transaction(isolation="repeatable_read", readonly=True):
        return await _audit_memory(conn, head_bytes, sample_revisions)


async def _audit_memory(
    conn: asyncpg.Connection,
    head_bytes: Callable[[str], Awaitable[tuple[int, int]]],
    sample_revisions: int,
) -> dict[str, int]:
    memories = await conn.fetch("SELECT * FROM memory.memories ORDER BY memory_ref")
    revisions_checked = 0
    for memory in memories:
        key = (memory["tenant_id"], memory["memory_id"])
        ref = memory["memory_ref"]
        revisions = await conn.fetch(
            "SELECT revision, change_count, manifest_bytes FROM memory.revisions"
            " WHERE tenant_id = $1 AND memory_id = $2 ORDER BY revision",
            *key,
        )
        numbers = [r["revision"] for r in revisions]
        head = memory["head_revision"]
        assert numbers == list(range(1, head + 1)), f"{ref}: revisions {numbers[:20]}…, head {head}"
        counts = {
            r["revision"]: r["n"]
            for r in await conn.fetch(
                "SELECT revision, count(*) AS n FROM memory.changes"
                " WHERE tenant_id = $1 AND memory_id = $2 GROUP BY revision",
                *key,
            )
        }
        assert all(counts.get(r["revision"]) == r["change_count"] for r in revisions), ref
        overlapping = await conn.fetchval(
            "SELECT count(*) FROM memory.manifest_items a JOIN memory.manifest_items b"
            " ON a.tenant_id = b.tenant_id AND a.memory_id = b.memory_id"
            " AND a.entry_id = b.entry_id AND a.from_rev < b.from_rev"
            " AND (a.to_rev IS NULL OR a.to_rev > b.from_rev)"
            " WHERE a.tenant_id = $1 AND a.memory_id = $2",
            *key,
        )
        assert overlapping == 0, f"{ref}: overlapping manifest item ranges"
        reported_revision, reported_bytes = await head_bytes(ref)
        assert reported_revision == head, ref
        assert reported_bytes == len(await materialise(conn, ref, head)), ref
        step = max(1, head // sample_revisions)
        for r in revisions[::step] + revisions[-1:]:
            document = await materialise(conn, ref, r["revision"])
            assert r["manifest_bytes"] == len(document), (ref, r["revision"])
            revisions_checked += 1
    return {"memories": len(memories), "revisions_checked": revisions_checked}
