-- budget.ledger_pools_v2: The pool rows a ledger row moves, as its `pools` document records
-- them ([{scope, scope_id, window_start}], in canonical order).
CREATE OR REPLACE FUNCTION budget.ledger_pools_v2(pools budget.engine_pool_v2[]) RETURNS jsonb
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT coalesce(jsonb_agg(jsonb_build_object('scope', p.scope, 'scope_id', p.scope_id,
                                                 'window_start', budget.iso_utc_v1(p.window_start))
                              ORDER BY p.ordinality), '[]'::jsonb)
    FROM unnest(pools) WITH ORDINALITY AS p
$$;
