-- budget.hold_end_v2: An open hold ends without usage (released, or expired): what it held
-- stops counting on its run and on every pool row it was held on (DESIGN 3.3).
--
-- Each hold ends exactly once. Ending more than the run (or a pool) holds would mean a hold
-- ended twice: a bug, never a client error, so it raises. A pool row that no longer exists
-- (`found` false) is left alone, but the ledger row still names it. `ledger` is the 'release'
-- or 'expire' row, with the request id it is recorded under (an expiry carries the batch's
-- first request on the run) and negative held deltas over the five dimensions.
CREATE OR REPLACE FUNCTION budget.hold_end_v2(
    INOUT run budget.engine_run_v2, INOUT pools budget.engine_pool_v2[],
    INOUT hold budget.engine_hold_v2, ending text, request_id text,
    OUT ledger budget.engine_ledger_v2)
LANGUAGE plpgsql STABLE PARALLEL SAFE AS $$
BEGIN
    FOR d IN 1..4 LOOP
        IF hold.granted[d] > run.held[d] THEN
            RAISE EXCEPTION 'hold % settles more than its run holds', hold.reservation_id;
        END IF;
        run.held[d] := run.held[d] - hold.granted[d];
    END LOOP;
    FOR b IN 1..coalesce(cardinality(pools), 0) LOOP
        CONTINUE WHEN NOT pools[b].found;
        pools[b].touched := true;
        FOR d IN 1..5 LOOP
            pools[b].held[d] := pools[b].held[d] - hold.granted[d];
        END LOOP;
    END LOOP;
    hold.state := ending;
    run.touched := true;
    ledger := ROW(run.run_id, request_id, CASE ending WHEN 'expired' THEN 'expire'
                                                      ELSE 'release' END,
                  NULL::text, hold.reservation_id, hold.model, run.policy_version,
                  '{0,0,0,0,0}'::bigint[],
                  ARRAY[-hold.granted[1], -hold.granted[2], -hold.granted[3],
                        -hold.granted[4], -hold.granted[5]],
                  budget.ledger_pools_v2(pools), NULL::jsonb)::budget.engine_ledger_v2;
END;
$$;
