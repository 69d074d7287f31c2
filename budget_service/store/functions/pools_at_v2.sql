-- budget.pools_at_v2: The pool rows at some positions of the batch's pools, in that order.
CREATE OR REPLACE FUNCTION budget.pools_at_v2(
    pools budget.engine_pool_v2[], slots integer[]) RETURNS budget.engine_pool_v2[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT coalesce(array_agg(pools[s.m] ORDER BY s.o), '{}')
    FROM unnest(slots) WITH ORDINALITY AS s(m, o)
$$;
