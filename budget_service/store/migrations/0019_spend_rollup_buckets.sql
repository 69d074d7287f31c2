-- Spend rollups spread over 8 buckets per group: a row per (group, hour) made every Consume of
-- a busy project and model in that hour update the same row, so concurrent Consume
-- transactions (server processes, replicas) queued on its row lock until each one committed.
-- A consume row now adds to the bucket of its database session (budget.roll_up_spend_v1
-- computes pg_backend_pid() & 7, store/functions/roll_up_spend_v1.sql): two transactions
-- contend on a group only when their sessions share a bucket, and one batch still writes one
-- row per group (no new lock order between batches). Every reader sums over the buckets
-- (store/reports.py groups and sums already). The rows so far stay in bucket 0, exact as
-- they are: a group's sum is the sum of its buckets.
-- The key keeps tenant_id first (the distribution column on Citus).
ALTER TABLE budget.spend_rollups
    ADD COLUMN bucket smallint NOT NULL DEFAULT 0 CHECK (bucket BETWEEN 0 AND 7);
ALTER TABLE budget.spend_rollups DROP CONSTRAINT spend_rollups_pkey;
ALTER TABLE budget.spend_rollups ADD PRIMARY KEY (
    tenant_id, hour, project_id, workflow_id, agent_id, model, end_user_id, api_key_id,
    tags_sha256, bucket);
