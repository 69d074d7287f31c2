-- budget.api_key_identities_v1: Every live issued-key secret with what authentication needs.
-- Current definition, applied by the repeatable step of servicekit/migrations.py whenever
-- this file changes.
--
-- The per-process key cache (budget_service/usecases/key_cache.py) reloads all of them every
-- refresh interval, and reads one digest's on a miss: authentication happens before the tenant is known, so this runs as the
-- owner (SECURITY DEFINER, upkeep policies of migration 0015) and returns the digest, tenant,
-- key id, roles, principal and when the secret stops being valid, never anything else.
CREATE OR REPLACE FUNCTION budget.api_key_identities_v1()
RETURNS TABLE (secret_sha256 text, tenant_id text, key_id text, roles text[], principal text,
               valid_seconds double precision)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    SET LOCAL ration.upkeep = 'on';
    RETURN QUERY
        SELECT s.secret_sha256, k.tenant_id, k.key_id, k.roles, k.principal,
               extract(epoch FROM s.not_after - now())::double precision
        FROM budget.api_key_secrets s
        JOIN budget.api_keys k ON k.tenant_id = s.tenant_id AND k.key_id = s.key_id
        WHERE k.revoked_at IS NULL AND (s.not_after IS NULL OR s.not_after > now());
END;
$$;
REVOKE EXECUTE ON FUNCTION budget.api_key_identities_v1() FROM PUBLIC;
