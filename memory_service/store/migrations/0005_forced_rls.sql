-- Row-level security as a real second line (DESIGN 5): forced on every memory table, with the
-- services connected as an application role that is neither a superuser, nor BYPASSRLS, nor
-- the tables' owner (the role that runs this migration). Every transaction enters the caller's
-- tenant in the transaction-local setting ration.tenant_id (servicekit/tenancy.py); the
-- policies of migration 0003 filter on it, now for the owner as well (FORCE).

ALTER TABLE memory.memories FORCE ROW LEVEL SECURITY;
ALTER TABLE memory.revisions FORCE ROW LEVEL SECURITY;
ALTER TABLE memory.changes FORCE ROW LEVEL SECURITY;
ALTER TABLE memory.entry_versions FORCE ROW LEVEL SECURITY;
ALTER TABLE memory.manifest_items FORCE ROW LEVEL SECURITY;
ALTER TABLE memory.request_log FORCE ROW LEVEL SECURITY;

-- The read path's one-statement functions enter the tenant without switching role: the login
-- role is the application role already (the services refuse a privileged one).
CREATE OR REPLACE FUNCTION memory.head_as_tenant(p_tenant text, p_memory_ref text)
RETURNS TABLE (memory_id uuid, head_revision bigint, now timestamptz)
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM set_config('ration.tenant_id', p_tenant, true);
    RETURN QUERY
        SELECT m.memory_id, m.head_revision, now() FROM memory.memories m
        WHERE m.tenant_id = p_tenant AND m.memory_ref = p_memory_ref AND m.head_revision > 0;
END
$$;

CREATE OR REPLACE FUNCTION memory.heads_as_tenant(p_tenant text, p_memory_refs text[])
RETURNS TABLE (memory_ref text, memory_id uuid, head_revision bigint, now timestamptz)
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM set_config('ration.tenant_id', p_tenant, true);
    RETURN QUERY
        SELECT wanted.ref, m.memory_id, m.head_revision, now()
        FROM unnest(p_memory_refs) AS wanted (ref)
        CROSS JOIN LATERAL (
            SELECT x.memory_id, x.head_revision FROM memory.memories x
            WHERE x.tenant_id = p_tenant AND x.memory_ref = wanted.ref AND x.head_revision > 0
            LIMIT 1
        ) AS m;
END
$$;

-- Request-log retention is the one cross-tenant job: a SECURITY DEFINER function (run as the
-- owner, with ration.upkeep = 'on' for this transaction) that only deletes stored replies past
-- retention. The upkeep policies are granted TO the owner alone, so the application role gains
-- nothing by setting ration.upkeep itself.
CREATE POLICY upkeep_read ON memory.request_log FOR SELECT TO CURRENT_USER
    USING (current_setting('ration.upkeep', true) = 'on');
CREATE POLICY upkeep_purge ON memory.request_log FOR DELETE TO CURRENT_USER
    USING (current_setting('ration.upkeep', true) = 'on');

CREATE FUNCTION memory.purge_request_log(p_hours integer) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    deleted bigint;
BEGIN
    SET LOCAL ration.upkeep = 'on';
    DELETE FROM memory.request_log r
    WHERE r.created_at < now() - make_interval(hours => greatest(p_hours, 24));
    GET DIAGNOSTICS deleted = ROW_COUNT;
    RETURN deleted;
END;
$$;
REVOKE EXECUTE ON FUNCTION memory.purge_request_log(integer) FROM PUBLIC;

-- Databases migrated before this rewrite have the former switch-to role; it needs nothing here
-- any more (an operator may then DROP ROLE ration_memory_rls, see deploy/README.md).
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'ration_memory_rls') THEN
        REVOKE ALL ON ALL TABLES IN SCHEMA memory FROM ration_memory_rls;
        REVOKE USAGE ON SCHEMA memory FROM ration_memory_rls;
    END IF;
END
$$;
