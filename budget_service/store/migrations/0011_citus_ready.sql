-- Ready for Citus (deploy/README.md, "Beyond one Postgres: Citus"), the same on one Postgres.

-- A trigger on a distributed table needs this when it is created; on plain PostgreSQL it is an
-- unused placeholder setting, gone at COMMIT.
SET LOCAL citus.enable_unsafe_triggers = on;

-- The tenant stream's order (migration 0008, store/tenant_events.py) is the id of the
-- transaction that wrote an event, compared with the reader's snapshot. Both must come from
-- the node that stores the tenant's rows: Citus evaluates a column DEFAULT of an INSERT sent
-- through the coordinator on the coordinator (another node's transaction ids), while a
-- delegated decide_v1 inserts on the worker. A row trigger runs where the row is stored, so
-- every event is stamped by its own node's transaction, whoever sent the INSERT. (A tenant
-- whose shard moves to another node starts that node's ids: see deploy/README.md.)
CREATE FUNCTION budget.stamp_tx_v1() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.tx := pg_current_xact_id();
    RETURN NEW;
END;
$$;

CREATE TRIGGER stamp_tx BEFORE INSERT ON budget.events
    FOR EACH ROW EXECUTE FUNCTION budget.stamp_tx_v1();
CREATE TRIGGER stamp_tx BEFORE INSERT ON budget.pool_events
    FOR EACH ROW EXECUTE FUNCTION budget.stamp_tx_v1();

-- Where a tenant stream that starts at the latest event starts (store/tenant_events.py): the
-- snapshot's xmax on the node that stamps the tenant's events. A function of the tenant, so
-- that on Citus it is delegated to that node (Citus delegates only a call standing alone,
-- `SELECT f(...)`: hence text, so the caller needs no cast around it).
CREATE FUNCTION budget.tenant_next_tx_v1(p_tenant text) RETURNS text
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN pg_snapshot_xmax(pg_current_snapshot())::text;
END;
$$;

-- Request-log retention without a recursive CTE (Citus plans one only with a filter on the
-- distribution column): one tenant at a time, each step a lookup of the next tenant id by the
-- primary key and a delete of that tenant's old rows by its (tenant_id, created_at) index, so
-- on Citus every delete is a single-shard statement.
CREATE OR REPLACE FUNCTION budget.purge_request_log(p_hours integer) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    cutoff constant timestamptz := now() - make_interval(hours => greatest(p_hours, 24));
    tenant text;
    n bigint;
    deleted bigint := 0;
BEGIN
    SET LOCAL ration.upkeep = 'on';
    tenant := (SELECT min(l.tenant_id) FROM budget.request_log l);
    WHILE tenant IS NOT NULL LOOP
        DELETE FROM budget.request_log r WHERE r.tenant_id = tenant AND r.created_at < cutoff;
        GET DIAGNOSTICS n = ROW_COUNT;
        deleted := deleted + n;
        tenant := (SELECT min(l.tenant_id) FROM budget.request_log l WHERE l.tenant_id > tenant);
    END LOOP;
    RETURN deleted;
END;
$$;
REVOKE EXECUTE ON FUNCTION budget.purge_request_log(integer) FROM PUBLIC;
