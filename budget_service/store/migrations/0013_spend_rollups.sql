-- Spend rollups (DESIGN 3.10): ReportSpend reads sums per (tenant, project, workflow, agent,
-- model, hour) instead of every consume row of its window, so a report costs O(groups), not
-- O(ledger rows). Maintained in the Consume's own transaction by a row trigger on the ledger
-- (budget.roll_up_spend_v1, store/functions/roll_up_spend_v1.sql): a consume row adds its
-- amounts to its group's row, so the rollups always equal the ledger (append-only). Sums are
-- numeric, as the reports' were: no sum can overflow and fail a Consume; ReportSpend refuses a
-- sum past int64. `model` is '' for a consume without one. `hour` is the UTC hour of the
-- ledger row's created_at. On Citus the table is distributed by tenant_id and co-located with
-- the ledger (servicekit/citus.py does that for every table with a tenant_id), so the trigger
-- writes on the shard where it fires.
CREATE TABLE budget.spend_rollups (
    tenant_id text NOT NULL,
    hour timestamptz NOT NULL,
    project_id text NOT NULL,
    workflow_id text NOT NULL,
    agent_id text NOT NULL,
    model text NOT NULL,
    cost_nanos numeric NOT NULL,
    tokens numeric NOT NULL,
    tool_calls numeric NOT NULL,
    retries numeric NOT NULL,
    consume_count bigint NOT NULL,
    PRIMARY KEY (tenant_id, hour, project_id, workflow_id, agent_id, model)
);

-- The ledger's rows so far, every tenant at once. The owner (who runs this) reads them through
-- a policy that lives only for this statement, admitting the transaction-local upkeep setting
-- (as the upkeep policies of migration 0005 do); the rollups get row-level security after. On a
-- large ledger expect the migration to take a while, holding its locks.
CREATE POLICY backfill_rollups ON budget.ledger FOR SELECT TO CURRENT_USER
    USING (current_setting('ration.upkeep', true) = 'on');
CREATE POLICY backfill_rollups ON budget.runs FOR SELECT TO CURRENT_USER
    USING (current_setting('ration.upkeep', true) = 'on');
SET LOCAL ration.upkeep = 'on';
INSERT INTO budget.spend_rollups (
    tenant_id, hour, project_id, workflow_id, agent_id, model,
    cost_nanos, tokens, tool_calls, retries, consume_count)
SELECT l.tenant_id, date_trunc('hour', l.created_at, 'UTC'), r.project_id, r.workflow_id,
    r.agent_id, coalesce(l.model, ''), sum(l.consumed_cost_nanos), sum(l.consumed_tokens),
    sum(l.consumed_tool_calls), sum(l.consumed_retries), count(*)
FROM budget.ledger l
JOIN budget.runs r ON r.tenant_id = l.tenant_id AND r.run_id = l.run_id
WHERE l.decision = 'consume'
GROUP BY 1, 2, 3, 4, 5, 6;
SET LOCAL ration.upkeep = 'off';
DROP POLICY backfill_rollups ON budget.ledger;
DROP POLICY backfill_rollups ON budget.runs;

ALTER TABLE budget.spend_rollups ENABLE ROW LEVEL SECURITY;
ALTER TABLE budget.spend_rollups FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON budget.spend_rollups
    USING (tenant_id = current_setting('ration.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('ration.tenant_id', true));

-- A trigger on a distributed table needs this when it is created (as in migration 0011); on
-- plain PostgreSQL it is an unused placeholder setting, gone at COMMIT.
SET LOCAL citus.enable_unsafe_triggers = on;

-- The trigger's function is source code (store/functions/roll_up_spend_v1.sql), applied after
-- the migrations in this same transaction: this placeholder only lets the trigger be created,
-- and no Consume can run before the file replaces it.
CREATE FUNCTION budget.roll_up_spend_v1() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'budget.roll_up_spend_v1 is defined by its function file';
END;
$$;
CREATE TRIGGER roll_up_spend AFTER INSERT ON budget.ledger
    FOR EACH ROW WHEN (NEW.decision = 'consume') EXECUTE FUNCTION budget.roll_up_spend_v1();
