-- memory.close_head_items: Which head ranges a write closes: one update per entry id.
-- Current definition, applied by the repeatable step of servicekit/migrations.py whenever
-- this file changes (moved here from migration 0006).
--
-- Statements Citus runs on the one shard of the tenant (DESIGN 6), as on a single PostgreSQL.

-- Closing the head ranges of a write's entries: one update per entry id, by the head index's
-- full key (tenant_id, memory_id, entry_id WHERE to_rev IS NULL). The former single UPDATE
-- found its rows by physical address (ctid), which Citus refuses in a distributed statement,
-- and any one-statement join with the ids lets the planner scan the whole memory instead while
-- the table has no statistics (right after a bulk load). Returns the rows closed; the caller
-- holds the head lock, so exactly the planned ones are open.
CREATE OR REPLACE FUNCTION memory.close_head_items(
    p_tenant text, p_memory_id uuid, p_revision bigint, p_entry_ids text[]
) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    wanted text;
    one bigint;
    closed bigint := 0;
BEGIN
    FOREACH wanted IN ARRAY p_entry_ids LOOP
        UPDATE memory.manifest_items SET to_rev = p_revision
        WHERE tenant_id = p_tenant AND memory_id = p_memory_id AND entry_id = wanted
          AND to_rev IS NULL;
        GET DIAGNOSTICS one = ROW_COUNT;
        closed := closed + one;
    END LOOP;
    RETURN closed;
END
$$;
