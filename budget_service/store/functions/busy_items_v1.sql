-- budget.busy_items_v1: Step 2 of a 'skip' batch (budget.decide_batch_v3), once its runs are
-- locked: the items of the runs locked elsewhere (`busy_ids`, budget.lock_runs_v3) are
-- answered 'busy' and dropped from the holds the batch looks up, so nothing of theirs is read,
-- decided, written or counted; the caller sends them again to wait in their run's lane.
CREATE OR REPLACE FUNCTION budget.busy_items_v1(
    items budget.decide_item_v2[], busy_ids text[], INOUT outcomes text[],
    INOUT named_runs text[], INOUT named_ids text[])
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
    FOR i IN 1..coalesce(cardinality(items), 0) LOOP
        IF items[i].run_id = ANY(busy_ids) THEN
            outcomes[i] := 'busy';
        END IF;
    END LOOP;
    SELECT coalesce(array_agg(x.r ORDER BY x.o), '{}'), coalesce(array_agg(x.h ORDER BY x.o), '{}')
    INTO named_runs, named_ids
    FROM unnest(named_runs, named_ids) WITH ORDINALITY AS x(r, h, o)
    WHERE NOT x.r = ANY(busy_ids);
END;
$$;
