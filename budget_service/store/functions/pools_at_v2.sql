-- budget.pools_at_v2: The pool rows at some positions of the batch's pools, in that order.
-- (A loop, not a query: called several times per item, and a SQL function with FROM is not
-- inlined, so each call would start an executor.)
CREATE OR REPLACE FUNCTION budget.pools_at_v2(
    pools budget.engine_pool_v2[], slots integer[]) RETURNS budget.engine_pool_v2[]
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
    picked budget.engine_pool_v2[] := '{}';
BEGIN
    IF coalesce(cardinality(slots), 0) = 0 THEN
        RETURN picked;
    END IF;
    FOR b IN 1..coalesce(cardinality(slots), 0) LOOP
        picked := picked || pools[slots[b]];
    END LOOP;
    RETURN picked;
END;
$$;
