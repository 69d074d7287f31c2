-- budget.reserve_grant_v2: What a granted Reserve holds, per dimension (all five).
--
-- The estimate itself (negative amounts as 0), except UP_TO in hard mode: tokens and cost are
-- cut to what every bounded balance has left (limit - consumed - held, at least 0; a pool's
-- held without other runs' holds past expiry), so the orchestrator can cap max_tokens to the
-- grant (DESIGN 3.3). Tool calls, retries and model calls are indivisible; advisory mode
-- grants the full estimate. The oracle's twin: tests/support/oracle.py `decide_reserve`.
CREATE OR REPLACE FUNCTION budget.reserve_grant_v2(
    amounts bigint[], up_to boolean, advisory boolean, run budget.engine_run_v2,
    pools budget.engine_pool_v2[]) RETURNS bigint[]
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
    g bigint[] := ARRAY[greatest(amounts[1], 0), greatest(amounts[2], 0),
                        greatest(amounts[3], 0), greatest(amounts[4], 0),
                        greatest(amounts[5], 0)];
BEGIN
    IF advisory OR NOT up_to THEN
        RETURN g;
    END IF;
    FOR d IN 1..2 LOOP
        CONTINUE WHEN g[d] = 0;
        IF run.lim[d] IS NOT NULL THEN
            g[d] := least(g[d], greatest(0, run.lim[d] - run.used[d] - run.held[d]));
        END IF;
        FOR b IN 1..coalesce(cardinality(pools), 0) LOOP
            CONTINUE WHEN pools[b].lim[d] IS NULL;
            g[d] := least(g[d], greatest(0, pools[b].lim[d] - pools[b].used[d]
                                            - (pools[b].held[d] - pools[b].other[d])));
        END LOOP;
    END LOOP;
    RETURN g;
END;
$$;
