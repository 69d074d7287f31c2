-- Budget service tables. tenant_id leads every primary key and index (single-shard calls when
-- distributed by tenant); amounts are bigint (money in nanos of USD); NULL limits are unbounded.

-- One row per run: its resolved budget, lifecycle state, once-only event flags and balances.
CREATE TABLE budget.runs (
    tenant_id text NOT NULL,
    run_id text NOT NULL,
    project_id text NOT NULL,
    workflow_id text NOT NULL,
    agent_id text NOT NULL,
    -- Hash of owners + overlay: OpenRun with the same run_id and another policy is RUN_EXISTS.
    open_fingerprint bytea NOT NULL,
    state text NOT NULL CHECK (state IN ('active', 'interrupted', 'failed', 'closed')),
    outcome text CHECK (outcome IN ('succeeded', 'failed', 'cancelled')),
    max_tokens bigint,
    max_cost_nanos bigint,
    max_tool_calls bigint,
    max_retries bigint,
    threshold_percent integer NOT NULL CHECK (threshold_percent BETWEEN 0 AND 100),
    on_exhaustion text NOT NULL CHECK (on_exhaustion IN ('fail', 'interrupt')),
    -- {"tokens": "project", "cost": "host", ...}: which scope sets each bounded limit.
    binding jsonb NOT NULL,
    -- [{"scope": "run", "allow": [...] | null, "deny": [...]}]: resolved once at OpenRun.
    model_lists jsonb NOT NULL,
    -- The pooled budgets this run draws on, resolved at OpenRun (limits are read live).
    pool_scopes text[] NOT NULL,
    pool_scope_ids text[] NOT NULL,
    -- Some scope of the run was ADVISORY at OpenRun (the host mode is applied on top).
    scope_advisory boolean NOT NULL,
    policy_version integer NOT NULL DEFAULT 1,
    consumed_tokens bigint NOT NULL DEFAULT 0 CHECK (consumed_tokens >= 0),
    consumed_cost_nanos bigint NOT NULL DEFAULT 0 CHECK (consumed_cost_nanos >= 0),
    consumed_tool_calls bigint NOT NULL DEFAULT 0 CHECK (consumed_tool_calls >= 0),
    consumed_retries bigint NOT NULL DEFAULT 0 CHECK (consumed_retries >= 0),
    held_tokens bigint NOT NULL DEFAULT 0 CHECK (held_tokens >= 0),
    held_cost_nanos bigint NOT NULL DEFAULT 0 CHECK (held_cost_nanos >= 0),
    held_tool_calls bigint NOT NULL DEFAULT 0 CHECK (held_tool_calls >= 0),
    held_retries bigint NOT NULL DEFAULT 0 CHECK (held_retries >= 0),
    crossed text[] NOT NULL DEFAULT '{}',
    exhausted text[] NOT NULL DEFAULT '{}',
    breached text[] NOT NULL DEFAULT '{}',
    -- The breach that stopped the run (FAILED or INTERRUPTED); NULL otherwise.
    stopped_dimension text,
    stopped_limit bigint,
    stopped_consumed bigint,
    stopped_observed bigint,
    stopped_scope text,
    stopped_scope_id text,
    next_seq bigint NOT NULL DEFAULT 1,
    advisory_refusals bigint NOT NULL DEFAULT 0,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, run_id)
);

-- Operator-declared budgets of workflows, agents and projects.
CREATE TABLE budget.scope_budgets (
    tenant_id text NOT NULL,
    scope text NOT NULL CHECK (scope IN ('workflow', 'agent', 'project')),
    scope_id text NOT NULL,
    kind text NOT NULL CHECK (kind IN ('per_run', 'pooled')),
    max_tokens bigint,
    max_cost_nanos bigint,
    max_tool_calls bigint,
    max_retries bigint,
    model_allow text[],  -- NULL: no allow list; '{}': allows nothing
    model_deny text[] NOT NULL DEFAULT '{}',
    threshold_percent integer,  -- kept as given; runs take theirs from the overlay
    on_exhaustion text NOT NULL DEFAULT 'fail',
    window_kind text NOT NULL CHECK (window_kind IN ('none', 'day', 'week', 'month')),
    enforcement text NOT NULL CHECK (enforcement IN ('hard', 'advisory')),
    version integer NOT NULL DEFAULT 1,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, scope, scope_id, kind)
);

-- Balances of pooled budgets, one row per calendar window: a new window is a new row, so
-- nothing is ever reset by a timer. Rows are kept as history.
CREATE TABLE budget.pool_balances (
    tenant_id text NOT NULL,
    scope text NOT NULL,
    scope_id text NOT NULL,
    window_start timestamptz NOT NULL,
    consumed_tokens bigint NOT NULL DEFAULT 0 CHECK (consumed_tokens >= 0),
    consumed_cost_nanos bigint NOT NULL DEFAULT 0 CHECK (consumed_cost_nanos >= 0),
    consumed_tool_calls bigint NOT NULL DEFAULT 0 CHECK (consumed_tool_calls >= 0),
    consumed_retries bigint NOT NULL DEFAULT 0 CHECK (consumed_retries >= 0),
    held_tokens bigint NOT NULL DEFAULT 0 CHECK (held_tokens >= 0),
    held_cost_nanos bigint NOT NULL DEFAULT 0 CHECK (held_cost_nanos >= 0),
    held_tool_calls bigint NOT NULL DEFAULT 0 CHECK (held_tool_calls >= 0),
    held_retries bigint NOT NULL DEFAULT 0 CHECK (held_retries >= 0),
    PRIMARY KEY (tenant_id, scope, scope_id, window_start)
);

-- Reservations. A hold ends exactly once: every transition is guarded by state = 'open'.
CREATE TABLE budget.holds (
    tenant_id text NOT NULL,
    run_id text NOT NULL,
    reservation_id text NOT NULL,
    model text NOT NULL,
    requested_tokens bigint NOT NULL,
    requested_cost_nanos bigint NOT NULL,
    requested_tool_calls bigint NOT NULL,
    requested_retries bigint NOT NULL,
    granted_tokens bigint NOT NULL,
    granted_cost_nanos bigint NOT NULL,
    granted_tool_calls bigint NOT NULL,
    granted_retries bigint NOT NULL,
    -- The pool balance rows (scope, scope_id, window_start) the grant is held on.
    pool_scopes text[] NOT NULL,
    pool_scope_ids text[] NOT NULL,
    pool_windows timestamptz[] NOT NULL,
    state text NOT NULL CHECK (state IN ('open', 'consumed', 'released', 'expired')),
    policy_version integer NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL,
    ended_at timestamptz,
    PRIMARY KEY (tenant_id, run_id, reservation_id),
    CHECK ((state = 'open') = (ended_at IS NULL))
);
-- Only open holds are indexed by expiry: the run's own (hot path) and the tenant's (pools).
CREATE INDEX holds_open_by_run ON budget.holds (tenant_id, run_id, expires_at)
    WHERE state = 'open';
CREATE INDEX holds_open_by_expiry ON budget.holds (tenant_id, expires_at) WHERE state = 'open';

-- Append-only decisions with the signed balance deltas they caused: summing the deltas of a
-- run (or of the rows naming a pool) gives its consumed and held balances.
CREATE TABLE budget.ledger (
    tenant_id text NOT NULL,
    run_id text NOT NULL,
    entry_id bigint GENERATED ALWAYS AS IDENTITY,
    decision text NOT NULL CHECK (
        decision IN ('open', 'grant', 'refusal', 'consume', 'release', 'expire', 'resume', 'close')
    ),
    -- The request that caused it (NULL for the sweeper's expiries): an audit trail of retries.
    request_id text,
    -- The refusal reason, or on an advisory grant the reason it would have been refused.
    reason text,
    reservation_id text,
    model text,
    policy_version integer NOT NULL,
    consumed_tokens bigint NOT NULL DEFAULT 0,
    consumed_cost_nanos bigint NOT NULL DEFAULT 0,
    consumed_tool_calls bigint NOT NULL DEFAULT 0,
    consumed_retries bigint NOT NULL DEFAULT 0,
    held_tokens bigint NOT NULL DEFAULT 0,
    held_cost_nanos bigint NOT NULL DEFAULT 0,
    held_tool_calls bigint NOT NULL DEFAULT 0,
    held_retries bigint NOT NULL DEFAULT 0,
    -- [{"scope", "scope_id", "window_start"}]: the pool rows the deltas also applied to.
    pools jsonb NOT NULL DEFAULT '[]',
    -- Requested amounts of a refusal, delta and approver of a resume, outcome of a close.
    detail jsonb,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, run_id, entry_id)
);

CREATE FUNCTION budget.ledger_is_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'budget.ledger is append-only';
END;
$$;
CREATE TRIGGER ledger_append_only BEFORE UPDATE OR DELETE ON budget.ledger
    FOR EACH ROW EXECUTE FUNCTION budget.ledger_is_append_only();

-- Each run's ordered event log, written in the transaction of the change that caused it.
CREATE TABLE budget.events (
    tenant_id text NOT NULL,
    run_id text NOT NULL,
    seq bigint NOT NULL,
    type text NOT NULL,
    payload_json text NOT NULL,  -- the exact OpenWOP v1 payload, forwarded verbatim
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, run_id, seq)
);

-- Idempotency (servicekit.idempotency): the response stored with the effect.
CREATE TABLE budget.request_log (
    tenant_id text NOT NULL,
    request_id text NOT NULL,
    fingerprint bytea NOT NULL,
    response bytea NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, request_id)
);
CREATE INDEX request_log_by_age ON budget.request_log (tenant_id, created_at);
