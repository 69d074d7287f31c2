-- budget.matching_pools_v2: The pool windows (positions) an item of a run draws on: the run's
-- current windows, less the per-model pools whose model_match glob the item's model does not
-- match (a call naming no model matches none of them). Canonical order kept.
CREATE OR REPLACE FUNCTION budget.matching_pools_v2(
    slots integer[], pools budget.engine_pool_v2[], model text) RETURNS integer[]
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
    kept integer[] := '{}';
BEGIN
    FOR b IN 1..coalesce(cardinality(slots), 0) LOOP
        IF pools[slots[b]].model_match IS NULL
           OR (model <> '' AND budget.glob_matches(pools[slots[b]].model_match, model)) THEN
            kept := kept || slots[b];
        END IF;
    END LOOP;
    RETURN kept;
END;
$$;
