-- budget.consume_pool_v2: Usage recorded on one pool window the Consume draws on.
--
-- Consumed grows by the usage and held shrinks by what the settled hold held there, over five
-- dimensions (model calls too). A pool never refuses nor stops a run on Consume; its own
-- events (the tenant stream) are budget.threshold.crossed and budget.exhausted, once per pool,
-- window and bounded dimension the usage touches (budget.consumption_marks_v2). Settling
-- more than the pool holds is a bug (a hold settled twice), never a client error: it raises.
CREATE OR REPLACE FUNCTION budget.consume_pool_v2(
    INOUT pool budget.engine_pool_v2, usage bigint[], settled bigint[], reservation text,
    OUT events budget.engine_event_v2[], OUT crossed text[], OUT exhausted text[])
LANGUAGE plpgsql STABLE PARALLEL SAFE AS $$
DECLARE
    names constant text[] := ARRAY['tokens', 'cost', 'toolCalls', 'retries', 'modelCalls'];
    marks record;
BEGIN
    events := '{}'; crossed := '{}'; exhausted := '{}';
    pool.touched := true;
    FOR d IN 1..5 LOOP
        IF settled[d] > pool.held[d] THEN
            RAISE EXCEPTION 'hold % settles more than its pool holds', reservation;
        END IF;
        pool.used[d] := pool.used[d] + usage[d];
        pool.held[d] := pool.held[d] - settled[d];
        CONTINUE WHEN usage[d] = 0 OR pool.lim[d] IS NULL;
        marks := budget.consumption_marks_v2(d, pool.used[d], pool.lim[d],
                                             pool.threshold_percent, pool.crossed, pool.exhausted);
        IF marks.crossed <> pool.crossed THEN
            crossed := crossed || names[d];
        END IF;
        IF marks.exhausted <> pool.exhausted THEN
            exhausted := exhausted || names[d];
        END IF;
        pool.crossed := marks.crossed;
        pool.exhausted := marks.exhausted;
        FOR e IN 1..cardinality(marks.types) LOOP
            events := events || budget.pool_event_v2(pool, marks.types[e], marks.payloads[e]);
            pool.events := pool.events + 1;
        END LOOP;
    END LOOP;
END;
$$;
