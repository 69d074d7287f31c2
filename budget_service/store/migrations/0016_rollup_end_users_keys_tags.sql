-- Spend rollups per end-user, API key and tag set (issue 27; DESIGN 3.10): ReportSpend's
-- END_USER, API_KEY and TAG groupings and its end-user and key filters read the rollups like
-- the others, exact and O(groups). The rollup key gains the run's end_user_id and api_key_id
-- ('' for none, as on the run) and the SHA-256 of its tags document (jsonb text is canonical:
-- keys sorted, so equal tag sets have equal digests); `tags` itself rides along, not in the key
-- (a tags document may be larger than a btree entry may be). The trigger
-- (store/functions/roll_up_spend_v1.sql) reads all three from the run row it already probes.
--
-- And OpenRun's writer takes the run's end-user, key and tags: budget.open_run_v2
-- (store/functions/open_run_v2.sql) replaces open_run_v1, whose file is deleted.
DROP FUNCTION IF EXISTS budget.open_run_v1(
    text, text, text, text, text, bytea, bigint[], integer, text, jsonb, jsonb, text[], text[],
    boolean, text);

-- No Consume may be half-way while the rollups are rebuilt: in-flight ledger inserts commit
-- first, new ones wait for this migration (and then run the new trigger function).
LOCK TABLE budget.ledger IN SHARE MODE;
LOCK TABLE budget.spend_rollups IN EXCLUSIVE MODE;

ALTER TABLE budget.spend_rollups
    ADD COLUMN end_user_id text NOT NULL DEFAULT '',
    ADD COLUMN api_key_id text NOT NULL DEFAULT '',
    ADD COLUMN tags jsonb NOT NULL DEFAULT '{}',
    ADD COLUMN tags_sha256 bytea NOT NULL DEFAULT sha256(convert_to('{}', 'UTF8'));
ALTER TABLE budget.spend_rollups DROP CONSTRAINT spend_rollups_pkey;
ALTER TABLE budget.spend_rollups ADD PRIMARY KEY (
    tenant_id, hour, project_id, workflow_id, agent_id, model, end_user_id, api_key_id,
    tags_sha256);

-- Rebuilt from the ledger, every tenant at once, as migration 0013 built them (the same
-- statement-long upkeep policies): a row of 0013 cannot be split by end-user, key or tags.
CREATE POLICY backfill_rollups ON budget.ledger FOR SELECT TO CURRENT_USER
    USING (current_setting('ration.upkeep', true) = 'on');
CREATE POLICY backfill_rollups ON budget.runs FOR SELECT TO CURRENT_USER
    USING (current_setting('ration.upkeep', true) = 'on');
CREATE POLICY backfill_rollups ON budget.spend_rollups TO CURRENT_USER
    USING (current_setting('ration.upkeep', true) = 'on')
    WITH CHECK (current_setting('ration.upkeep', true) = 'on');
SET LOCAL ration.upkeep = 'on';
DELETE FROM budget.spend_rollups;
INSERT INTO budget.spend_rollups (
    tenant_id, hour, project_id, workflow_id, agent_id, model, end_user_id, api_key_id,
    tags_sha256, tags, cost_nanos, tokens, tool_calls, retries, consume_count)
SELECT l.tenant_id, date_trunc('hour', l.created_at, 'UTC'), r.project_id, r.workflow_id,
    r.agent_id, coalesce(l.model, ''), r.end_user_id, r.api_key_id,
    sha256(convert_to(r.tags::text, 'UTF8')), min(r.tags::text)::jsonb,
    sum(l.consumed_cost_nanos), sum(l.consumed_tokens), sum(l.consumed_tool_calls),
    sum(l.consumed_retries), count(*)
FROM budget.ledger l
JOIN budget.runs r ON r.tenant_id = l.tenant_id AND r.run_id = l.run_id
WHERE l.decision = 'consume'
GROUP BY 1, 2, 3, 4, 5, 6, 7, 8, 9;
SET LOCAL ration.upkeep = 'off';
DROP POLICY backfill_rollups ON budget.ledger;
DROP POLICY backfill_rollups ON budget.runs;
DROP POLICY backfill_rollups ON budget.spend_rollups;

-- The engine's run carries its end-user and key, so budget.scope_id_of_v2 names them like the
-- other scopes (budget.lock_runs_v2 fills them from the run row it reads anyway).
ALTER TYPE budget.engine_run_v2
    ADD ATTRIBUTE end_user_id text,
    ADD ATTRIBUTE api_key_id text;
