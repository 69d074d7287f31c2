-- budget.roll_up_spend_v1: Trigger: a consume row of the ledger adds its amounts to its spend
-- rollup (migrations 0013, 0016, 0019), in the Consume's own transaction, so the
-- rollups always equal the ledger and ReportSpend reads O(groups).
--
-- The group's owners come from the run (a primary-key probe; OpenRun fixed them): project,
-- workflow, agent, end-user, API key and tags (keyed by their digest; the same probe, so the
-- end-user, key and tag groupings cost the trigger nothing more). The hour is the row's
-- created_at in UTC. An upsert: the first consume of a group and hour inserts its row, later
-- ones add to it. The row is one of the group's 8 buckets (migration 0019), the one of this
-- database session (pg_backend_pid() & 7): a Consume waits for another transaction's commit
-- only on a row that transaction wrote, so sessions of distinct buckets (server processes,
-- pool connections, replicas) never queue on a busy group's row; and a batch still writes
-- one row per group, as before, so buckets add no lock-order (deadlock) between batches, as
-- a bucket per run would for a batch of many runs. Every reader sums a group's buckets.
-- Runs in the row's own node on Citus (the rollups are co-located with the ledger). Two
-- single-row statements, each naming the tenant: the run's probe, then INSERT … VALUES … ON
-- CONFLICT. Citus plans each as a fast-path router query and keeps its local plan; the one
-- INSERT … SELECT FROM budget.runs this was went through Citus's insert-select planning and a
-- deparse on every consume row (35 % of a worker's CPU in a Reserve+Consume load, issue 28).
CREATE OR REPLACE FUNCTION budget.roll_up_spend_v1() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    r record;
BEGIN
    SELECT project_id, workflow_id, agent_id, end_user_id, api_key_id, tags INTO r
    FROM budget.runs
    WHERE tenant_id = NEW.tenant_id AND run_id = NEW.run_id;
    IF NOT FOUND THEN  -- no run, no rollup row, as the join of the one statement gave
        RETURN NULL;
    END IF;
    INSERT INTO budget.spend_rollups AS s (
        tenant_id, hour, project_id, workflow_id, agent_id, model, end_user_id, api_key_id,
        tags_sha256, bucket, tags, cost_nanos, tokens, tool_calls, retries, consume_count)
    VALUES (NEW.tenant_id, date_trunc('hour', NEW.created_at, 'UTC'), r.project_id,
        r.workflow_id, r.agent_id, coalesce(NEW.model, ''), r.end_user_id, r.api_key_id,
        sha256(convert_to(r.tags::text, 'UTF8')), (pg_backend_pid() & 7)::smallint, r.tags,
        NEW.consumed_cost_nanos,
        NEW.consumed_tokens, NEW.consumed_tool_calls, NEW.consumed_retries, 1)
    ON CONFLICT (tenant_id, hour, project_id, workflow_id, agent_id, model, end_user_id,
                 api_key_id, tags_sha256, bucket) DO UPDATE SET
        cost_nanos = s.cost_nanos + EXCLUDED.cost_nanos,
        tokens = s.tokens + EXCLUDED.tokens,
        tool_calls = s.tool_calls + EXCLUDED.tool_calls,
        retries = s.retries + EXCLUDED.retries,
        consume_count = s.consume_count + 1;
    RETURN NULL;
END;
$$;
