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
