-- budget.ledger_pools_v2: The pool rows a ledger row moves, as its `pools` document records
-- them ([{scope, scope_id, window_start}], in canonical order).
CREATE OR REPLACE FUNCTION budget.ledger_pools_v2(pools budget.engine_pool_v2[]) RETURNS jsonb
LANGUAGE plpgsql STABLE PARALLEL SAFE AS $$
DECLARE
    doc jsonb := '[]';
BEGIN
    FOR b IN 1..coalesce(cardinality(pools), 0) LOOP
        doc := doc || jsonb_build_object('scope', pools[b].scope, 'scope_id', pools[b].scope_id,
                                         'window_start', budget.iso_utc_v1(pools[b].window_start));
    END LOOP;
    RETURN doc;
END;
$$;
