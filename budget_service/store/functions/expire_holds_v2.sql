-- budget.expire_holds_v2: Expiry, before any item is decided: every open hold of a deciding run
-- past its expiry ends 'expired' (budget.hold_end_v2), so what it held no longer counts for
-- the items after it (DESIGN 3.3: holds past expires_at stop counting at once).
--
-- Only the runs in `deciding` expire theirs: a run with no request decided here (only replays)
-- is left as it is, since a replay writes nothing. The ledger 'expire' row carries the batch's
-- first request id on the run (NULL for the sweeper's expiry, budget.lock_run_v1); run.expired
-- counts them for that request's metrics.
CREATE OR REPLACE FUNCTION budget.expire_holds_v2(
    INOUT runs budget.engine_run_v2[], INOUT pools budget.engine_pool_v2[],
    INOUT holds budget.engine_hold_v2[], deciding text[], now timestamptz,
    OUT ledger budget.engine_ledger_v2[])
LANGUAGE plpgsql STABLE PARALLEL SAFE AS $$
#variable_conflict use_variable
DECLARE
    ended record; held_on budget.engine_pool_v2[]; k integer;
BEGIN
    ledger := '{}';
    FOR h IN 1..coalesce(cardinality(holds), 0) LOOP
        CONTINUE WHEN holds[h].state <> 'open' OR holds[h].expires_at > now;
        k := holds[h].run;
        CONTINUE WHEN NOT runs[k].run_id = ANY(deciding);
        held_on := ARRAY(SELECT pools[m] FROM unnest(holds[h].pools) WITH ORDINALITY AS s(m, o)
                         ORDER BY s.o);
        ended := budget.hold_end_v2(runs[k], held_on, holds[h], 'expired',
                                    runs[k].first_request);
        runs[k] := ended.run;
        holds[h] := ended.hold;
        FOR b IN 1..coalesce(cardinality(holds[h].pools), 0) LOOP
            pools[holds[h].pools[b]] := ended.pools[b];
        END LOOP;
        runs[k].expired := runs[k].expired + 1;
        ledger := ledger || ended.ledger;
    END LOOP;
END;
$$;
