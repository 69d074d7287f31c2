-- budget.stamp_tx_v1: Trigger: which transaction wrote an event row (the tenant stream's order).
-- Current definition, applied by the repeatable step of servicekit/migrations.py whenever
-- this file changes (moved here from migration 0011).
--
-- The tenant stream's order (migration 0008, store/tenant_events.py) is the id of the
-- transaction that wrote an event, compared with the reader's snapshot. Both must come from
-- the node that stores the tenant's rows: Citus evaluates a column DEFAULT of an INSERT sent
-- through the coordinator on the coordinator (another node's transaction ids), while a
-- delegated decide_v1 inserts on the worker. A row trigger runs where the row is stored, so
-- every event is stamped by its own node's transaction, whoever sent the INSERT. (A tenant
-- whose shard moves to another node starts that node's ids: see deploy/README.md.)
CREATE OR REPLACE FUNCTION budget.stamp_tx_v1() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.tx := pg_current_xact_id();
    RETURN NEW;
END;
$$;
