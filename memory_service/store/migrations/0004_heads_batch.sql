-- The heads of several memories of one tenant in one statement (servicekit/coalesce.py batches
-- concurrent ListMemory and SearchMemory calls): the same tenant entry as head_as_tenant, then
-- one key lookup per ref (LATERAL ... LIMIT 1, so an unanalyzed table cannot turn the list
-- into a scan). Refs that name no memory of this tenant are simply absent.
CREATE FUNCTION memory.heads_as_tenant(p_tenant text, p_memory_refs text[])
RETURNS TABLE (memory_ref text, memory_id uuid, head_revision bigint, now timestamptz)
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM set_config('role', 'ration_memory_rls', true),
            set_config('ration.tenant_id', p_tenant, true);
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
