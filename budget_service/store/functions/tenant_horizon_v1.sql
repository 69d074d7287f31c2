-- budget.tenant_horizon_v1: How far a tenant stream may read: below every transaction of this
-- database still in progress.
--
-- The stream (store/tenant_events.py) reads only events written by transactions that have
-- ended, so that nothing can later appear before a position already read. The snapshot's xmin
-- would do, but it counts the transactions of every database on the server: one long write
-- transaction in another database would hold every tenant's stream (and `ration notify`).
-- So the horizon is the oldest transaction in progress when this snapshot was taken, leaving
-- out those that pg_stat_activity, read after the snapshot, shows in another database (a
-- transaction of ours that ended meanwhile is not shown: it holds the horizon this once,
-- which is safe), or the snapshot's xmax when none is left. Transactions with no backend row
-- (prepared ones, background workers) are kept: they may be ours. backend_xid is the 32-bit
-- form of the snapshot's 64-bit ids. A function of the tenant, so that on Citus it runs on the
-- node that stamps the tenant's events (as budget.tenant_next_tx_v1). The scan that follows,
-- in a later snapshot, still sees every transaction below it as ended.
CREATE OR REPLACE FUNCTION budget.tenant_horizon_v1(p_tenant text) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT coalesce(
        (SELECT min(x.xid) FROM pg_snapshot_xip(s.snap) AS x(xid)
         WHERE NOT EXISTS (
            SELECT 1 FROM pg_stat_activity a
            WHERE a.datname <> current_database()
              AND a.backend_xid::text::numeric = x.xid::text::numeric % 4294967296)),
        pg_snapshot_xmax(s.snap))::text
    FROM (SELECT pg_current_snapshot() AS snap) s
$$;
