-- memory.heads_as_tenant: The read path's heads of a tenant's memories, in one statement.
-- Current definition, applied by the repeatable step of servicekit/migrations.py whenever
-- this file changes (moved here from migration 0005).
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
