-- budget.consumption_marks_v2: The once-per-dimension marks consumption sets on a balance (a
-- run's or a pool window's), and their events (DESIGN 3.4, 3.5).
--
-- budget.threshold.crossed the first time consumed reaches the threshold percent of the limit
-- (budget.threshold_reached_v2), then budget.exhausted the first time consumed >= limit. Each
-- mark is a bit of the balance's flags (bit d - 1), so each event is emitted once per
-- dimension (a ResumeRun that raises a limit clears its run's bits). `types` and `payloads`
-- are the events in order; the caller numbers them in its own sequence.
CREATE OR REPLACE FUNCTION budget.consumption_marks_v2(
    d integer, used bigint, lim bigint, percent integer, INOUT crossed integer,
    INOUT exhausted integer, OUT types text[], OUT payloads text[])
LANGUAGE plpgsql STABLE PARALLEL SAFE AS $$
DECLARE
    names constant text[] := ARRAY['tokens', 'cost', 'toolCalls', 'retries', 'modelCalls'];
BEGIN
    types := '{}'; payloads := '{}';
    IF (crossed >> (d - 1)) & 1 = 0 AND budget.threshold_reached_v2(used, lim, percent) THEN
        crossed := crossed | (1 << (d - 1));
        types := types || 'budget.threshold.crossed'::text;
        payloads := payloads || format(
            '{"dimension":"%s","consumed":%s,"limit":%s,"percent":%s}', names[d],
            budget.amount_text(d, used), budget.amount_text(d, lim), percent);
    END IF;
    IF (exhausted >> (d - 1)) & 1 = 0 AND used >= lim THEN
        exhausted := exhausted | (1 << (d - 1));
        types := types || 'budget.exhausted'::text;
        payloads := payloads || format(
            '{"dimension":"%s","consumed":%s,"limit":%s}', names[d],
            budget.amount_text(d, used), budget.amount_text(d, lim));
    END IF;
END;
$$;
