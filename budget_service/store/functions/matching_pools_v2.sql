-- budget.matching_pools_v2: The pool windows (positions) an item of a run draws on: the run's
-- current windows, less the per-model pools whose model_match glob the item's model does not
-- match (a call naming no model matches none of them). Canonical order kept.
CREATE OR REPLACE FUNCTION budget.matching_pools_v2(
    slots integer[], pools budget.engine_pool_v2[], model text) RETURNS integer[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT coalesce(array_agg(u.m ORDER BY u.o), '{}')
    FROM unnest(slots) WITH ORDINALITY AS u(m, o)
    WHERE (pools[u.m]).model_match IS NULL
       OR (model <> '' AND budget.glob_matches((pools[u.m]).model_match, model))
$$;
