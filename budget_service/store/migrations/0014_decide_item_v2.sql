-- One item of a batch of the engine (budget.decide_v2, store/functions/decide_v2.sql): a
-- Reserve, Consume, Release or Check, field for field store/decisions.py's Item. A batch is one
-- array of these (Procrastinate's procrastinate_job_to_defer_v1[]) instead of decide_v1's
-- twelve parallel arrays. Amounts in dimension order: tokens, cost (nanos of USD), tool calls,
-- retries; reservation_id is the new hold's id (reserve) or the hold named ('' for none).
CREATE TYPE budget.decide_item_v2 AS (
    kind text,
    request_id text,
    fingerprint bytea,
    run_id text,
    reservation_id text,
    model text,
    tokens bigint,
    cost_nanos bigint,
    tool_calls bigint,
    retries bigint,
    up_to boolean,
    ttl_seconds integer
);

-- The engine's working values while it decides a batch (store/functions/decide_batch_v2.sql
-- and the step functions it calls, which take and return them). Never stored in a table.
-- Amount arrays are in dimension order; a run has the four of RFC 0084, a pool also
-- modelCalls (index 5). Flags are bit masks (budget.flag_mask_v1: bit 1 tokens, 2 cost,
-- 4 toolCalls, 8 retries, 16 modelCalls).

-- A locked run: its row's facts as the batch changes them, and what the batch did to it.
CREATE TYPE budget.engine_run_v2 AS (
    run_id text,
    project_id text,
    workflow_id text,
    agent_id text,
    state text,
    threshold_percent integer,
    on_exhaustion text,
    binding jsonb,
    model_lists jsonb,
    scope_advisory boolean,
    policy_version integer,
    next_seq bigint,
    lim bigint[],
    used bigint[],
    held bigint[],
    crossed integer,
    exhausted integer,
    breached integer,
    stop_dim text,
    stop_lim bigint,
    stop_used bigint,
    stop_obs bigint,
    stop_scope text,
    stop_scope_id text,
    pools integer[],  -- the positions of its current pool windows, canonical order
    first_request text,  -- the batch's first request on the run ('expire' rows carry it)
    expired integer,
    advisory_refusals integer,
    events integer,  -- events appended by this batch (their seq follows next_seq)
    touched boolean
);

-- A pool window's row, as locked (found) or about to be created (current).
CREATE TYPE budget.engine_pool_v2 AS (
    scope text,
    scope_id text,
    window_start timestamptz,
    window_kind text,
    is_current boolean,
    found boolean,
    lim bigint[],
    used bigint[],
    held bigint[],
    other bigint[],  -- held by other runs' holds past expiry: no longer counts
    threshold_percent integer,
    model_match text,
    crossed integer,
    exhausted integer,
    next_seq bigint,
    events integer,
    touched boolean
);

-- A hold the batch may end (loaded) or creates (is_new).
CREATE TYPE budget.engine_hold_v2 AS (
    reservation_id text,
    run integer,  -- the run's position in the batch
    model text,
    state text,
    was_open boolean,
    is_new boolean,
    requested bigint[],
    granted bigint[],
    pools integer[],  -- the positions of the pool rows it holds on
    created_at timestamptz,
    expires_at timestamptz,
    policy_version integer
);

-- A ledger row to insert (amount deltas over the five dimensions).
CREATE TYPE budget.engine_ledger_v2 AS (
    run_id text,
    request_id text,
    decision text,
    reason text,
    reservation_id text,
    model text,
    policy_version integer,
    consumed bigint[],
    held bigint[],
    pools jsonb,
    detail jsonb
);

-- An event to append: a run's (run_id set) or a pool window's (scope, scope_id, window_start).
CREATE TYPE budget.engine_event_v2 AS (
    run_id text,
    scope text,
    scope_id text,
    window_start timestamptz,
    seq bigint,
    type text,
    payload text
);

-- The verdict of a Reserve's estimate (budget.reserve_verdict_v2): the first breach, else the
-- first contention, each with its dimension, balance (0 the run, else the pool's position)
-- and amounts; or the field whose total would leave the bigint range.
CREATE TYPE budget.engine_verdict_v2 AS (
    breach_dim integer,
    breach_pool integer,
    breach_limit bigint,
    breach_used bigint,
    breach_observed bigint,
    held_dim integer,
    held_pool integer,
    held_limit bigint,
    held_used bigint,
    held_held bigint,
    held_requested bigint,
    invalid text
);
