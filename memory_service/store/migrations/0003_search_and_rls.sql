-- Search (DESIGN 4.7) and CTI-1's second line, row-level security (DESIGN 5).

-- Sentence-embedding vector of the redacted content: little-endian float32 x 384, unit length,
-- computed at write time. NULL for versions written while the embedder was off; the read path
-- fills those in the first time a revision's vectors are needed.
ALTER TABLE memory.entry_versions ADD COLUMN embedding bytea;

-- The lexical signal of relevance ranking, over the redacted content. The 'simple'
-- configuration lower-cases words and nothing else: no stemming and no stop words, so names,
-- identifiers and text in any language index exactly as written, and websearch_to_tsquery
-- matches them as typed. Natural-language paraphrase is the embedding's job.
ALTER TABLE memory.entry_versions
    ADD COLUMN search_vector tsvector
    GENERATED ALWAYS AS (to_tsvector('simple'::regconfig, content)) STORED;

-- GIN cannot lead with tenant_id without btree_gin (absent from the embedded server), so this
-- is the one index that does not; every query that uses it also filters tenant_id and
-- memory_id, and under Citus each shard's index holds that shard's tenants only.
CREATE INDEX entry_versions_search ON memory.entry_versions USING gin (search_vector);

-- Row-level security: every transaction enters the caller's tenant in the transaction-local
-- setting ration.tenant_id, so a query that forgot its tenant filter still sees one tenant's
-- rows. (This file first also created a NOLOGIN role for the service to switch into; that
-- needed a superuser to migrate. It was rewritten in place for fresh installs, and databases
-- that applied the first text are accepted (memory_service/app.py); migration 0005 brings both
-- to the same state: RLS forced, services connected as a non-owner application role.)
ALTER TABLE memory.memories ENABLE ROW LEVEL SECURITY;
ALTER TABLE memory.revisions ENABLE ROW LEVEL SECURITY;
ALTER TABLE memory.changes ENABLE ROW LEVEL SECURITY;
ALTER TABLE memory.entry_versions ENABLE ROW LEVEL SECURITY;
ALTER TABLE memory.manifest_items ENABLE ROW LEVEL SECURITY;
ALTER TABLE memory.request_log ENABLE ROW LEVEL SECURITY;

-- An unset ration.tenant_id reads as NULL, which matches no row: fail closed.
CREATE POLICY tenant_isolation ON memory.memories
    USING (tenant_id = current_setting('ration.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('ration.tenant_id', true));
CREATE POLICY tenant_isolation ON memory.revisions
    USING (tenant_id = current_setting('ration.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('ration.tenant_id', true));
CREATE POLICY tenant_isolation ON memory.changes
    USING (tenant_id = current_setting('ration.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('ration.tenant_id', true));
CREATE POLICY tenant_isolation ON memory.entry_versions
    USING (tenant_id = current_setting('ration.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('ration.tenant_id', true));
CREATE POLICY tenant_isolation ON memory.manifest_items
    USING (tenant_id = current_setting('ration.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('ration.tenant_id', true));
CREATE POLICY tenant_isolation ON memory.request_log
    USING (tenant_id = current_setting('ration.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('ration.tenant_id', true));

-- The read path's first statement, and usually its only one: it enters the tenant (the same
-- role switch and transaction-local setting as memory_service/tenancy.py) and then reads the
-- head and the database clock, all in the single statement's own transaction, so nothing
-- outlives it. The query inside is planned after the switch, so the policies apply to it.
CREATE FUNCTION memory.head_as_tenant(p_tenant text, p_memory_ref text)
RETURNS TABLE (memory_id uuid, head_revision bigint, now timestamptz)
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM set_config('role', 'ration_memory_rls', true),
            set_config('ration.tenant_id', p_tenant, true);
    RETURN QUERY
        SELECT m.memory_id, m.head_revision, now() FROM memory.memories m
        WHERE m.tenant_id = p_tenant AND m.memory_ref = p_memory_ref AND m.head_revision > 0;
END
$$;
