-- budget.reserve_verdict_v2: The verdict of an estimate over a run and the pools it draws on.
--
-- All or nothing across balances (DESIGN 3.3): the run first, then each pool in canonical
-- order (as given), dimensions in order; the first breach anywhere outranks any contention
-- (which is then not reported). Zero amounts are not requests and are not judged; model calls
-- (index 5) are a pool's dimension only. A pool's held excludes other runs' holds past expiry
-- (they stopped counting). An unbounded balance never refuses, but its held plus the estimate
-- must stay a bigint: else `invalid` names the field (VALIDATION_FAILED) and nothing else is
-- judged. `*_pool` is 0 for the run, else the pool's position in `pools`. The oracle's twin is
-- tests/support/oracle.py `decide_reserve` (its breach and contention).
CREATE OR REPLACE FUNCTION budget.reserve_verdict_v2(
    amounts bigint[], up_to boolean, run budget.engine_run_v2, pools budget.engine_pool_v2[])
RETURNS budget.engine_verdict_v2
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
    v budget.engine_verdict_v2;
    fields constant text[] := ARRAY['tokens', 'cost_nanos', 'tool_calls', 'retries',
                                     'model_calls'];
    a bigint; lim bigint; used bigint; held bigint; fit text;
BEGIN
    <<balances>>
    FOR b IN 0..coalesce(cardinality(pools), 0) LOOP
        FOR d IN 1..5 LOOP
            a := amounts[d];
            CONTINUE WHEN a <= 0 OR (b = 0 AND d = 5);
            IF b = 0 THEN
                lim := run.lim[d]; used := run.used[d]; held := run.held[d];
            ELSE
                lim := pools[b].lim[d]; used := pools[b].used[d];
                held := pools[b].held[d] - pools[b].other[d];
            END IF;
            IF lim IS NULL AND held::numeric + a > 9223372036854775807 THEN
                v.invalid := 'estimate.' || fields[d];
                EXIT balances;
            END IF;
            fit := budget.reserve_fit_v2(lim, used, held, a, up_to AND d <= 2);
            IF fit = 'breach' AND v.breach_dim IS NULL THEN
                v.breach_dim := d; v.breach_pool := b; v.breach_limit := lim;
                v.breach_used := used; v.breach_observed := used + a;
            ELSIF fit = 'contention' AND v.held_dim IS NULL THEN
                v.held_dim := d; v.held_pool := b; v.held_limit := lim; v.held_used := used;
                v.held_held := held; v.held_requested := a;
            END IF;
        END LOOP;
    END LOOP;
    IF v.breach_dim IS NOT NULL THEN
        v.held_dim := NULL;
    END IF;
    RETURN v;
END;
$$;
