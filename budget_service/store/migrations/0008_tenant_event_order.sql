-- The tenant event stream (WatchTenantEvents, store/tenant_events.py) reads a tenant's events
-- in (tx, run_id, seq) order, where tx is the id of the transaction that wrote the event, and
-- only below its snapshot's xmin (every transaction with a smaller id has ended, so the events
-- there are final). The DEFAULT stamps every insert without any writer naming the column
-- (budget.decide_v1 and store/changes.py list their columns). pg_current_xact_id() is STABLE,
-- so adding the column stores one default for the existing rows without rewriting the table:
-- they all read as written by this migration's transaction, ordered by run_id and seq.
ALTER TABLE budget.events ADD COLUMN tx xid8 NOT NULL DEFAULT pg_current_xact_id();

-- The stream walks this index in order from its position. run_id in collation "C" (bytes
-- order), so the order and the cursors do not depend on the database's locale. Built in the
-- migration's transaction: on a large existing table expect writes to budget.events to wait
-- while it builds.
CREATE INDEX events_by_tx ON budget.events (tenant_id, tx, run_id COLLATE "C", seq);
