-- budget.consume_pool_v2: Usage recorded on one pool window the Consume draws on.
--
-- Consumed grows by the usage and held shrinks by what the settled hold held there, over five
-- dimensions (model calls too). A pool never refuses nor stops a run on Consume; its own
-- events (the tenant stream) are budget.threshold.crossed and budget.exhausted, once per pool,
-- window and bounded dimension the usage touches (DESIGN 3.2, 3.5). Settling more than the
-- pool holds is a bug (a hold settled twice), never a client error: it raises.
CREATE OR REPLACE FUNCTION budget.consume_pool_v2(
    INOUT pool budget.engine_pool_v2, usage bigint[], settled bigint[], reservation text,
    OUT events budget.engine_event_v2[], OUT crossed text[], OUT exhausted text[])
LANGUAGE plpgsql STABLE PARALLEL SAFE AS $$
DECLARE
    names constant text[] := ARRAY['tokens', 'cost', 'toolCalls', 'retries', 'modelCalls'];
    lim bigint; used bigint;
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
        lim := pool.lim[d];
        used := pool.used[d];
        IF (pool.crossed >> (d - 1)) & 1 = 0
           AND budget.threshold_reached_v2(used, lim, pool.threshold_percent) THEN
            pool.crossed := pool.crossed | (1 << (d - 1));
            crossed := crossed || names[d];
            events := events || budget.pool_event_v2(pool, 'budget.threshold.crossed', format(
                '{"dimension":"%s","consumed":%s,"limit":%s,"percent":%s}', names[d],
                budget.amount_text(d, used), budget.amount_text(d, lim),
                pool.threshold_percent));
            pool.events := pool.events + 1;
        END IF;
        IF (pool.exhausted >> (d - 1)) & 1 = 0 AND used >= lim THEN
            pool.exhausted := pool.exhausted | (1 << (d - 1));
            exhausted := exhausted || names[d];
            events := events || budget.pool_event_v2(pool, 'budget.exhausted', format(
                '{"dimension":"%s","consumed":%s,"limit":%s}', names[d],
                budget.amount_text(d, used), budget.amount_text(d, lim)));
            pool.events := pool.events + 1;
        END IF;
    END LOOP;
END;
$$;
