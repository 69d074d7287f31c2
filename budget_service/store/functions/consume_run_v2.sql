-- budget.consume_run_v2: Usage recorded on a run, and the events it causes (DESIGN 3.4, 3.5).
--
-- Consume is never refused: the provider already billed it. Per dimension: consumed grows by
-- the usage, held shrinks by what the settled hold held. Per bounded dimension the usage
-- touches, in order: budget.consumed; budget.threshold.crossed and budget.exhausted, once
-- each (budget.consumption_marks_v2); and when consumed > limit on an ACTIVE run, in hard
-- mode, cap.breached. Exactly spent is exhausted, not breached; a stopped or closed run had
-- its breach. Advisory mode emits no cap.breached and never stops the run (RFC 0084 section
-- E). The first breached dimension stops the run (budget.run_stop_v2). `crossed`,
-- `exhausted` and `breached` name what this usage newly set. The oracle's twin:
-- tests/support/oracle.py `apply_consume`.
CREATE OR REPLACE FUNCTION budget.consume_run_v2(
    INOUT run budget.engine_run_v2, usage bigint[], settled bigint[], advisory boolean,
    OUT events budget.engine_event_v2[], OUT crossed text[], OUT exhausted text[],
    OUT breached text[])
LANGUAGE plpgsql STABLE PARALLEL SAFE AS $$
DECLARE
    names constant text[] := ARRAY['tokens', 'cost', 'toolCalls', 'retries'];
    kinds constant text[] :=
        ARRAY['budget-tokens', 'budget-cost', 'budget-tool-calls', 'budget-retries'];
    lim bigint; used bigint; first_breach integer; stop record; marks record;
BEGIN
    events := '{}'; crossed := '{}'; exhausted := '{}'; breached := '{}';
    FOR d IN 1..4 LOOP
        run.used[d] := run.used[d] + usage[d];
        run.held[d] := run.held[d] - settled[d];
        lim := run.lim[d];
        used := run.used[d];
        CONTINUE WHEN usage[d] = 0 OR lim IS NULL;
        events := events || budget.run_event_v2(run, 'budget.consumed', format(
            '{"dimension":"%s","consumed":%s,"limit":%s,"remaining":%s}', names[d],
            budget.amount_text(d, used), budget.amount_text(d, lim),
            budget.amount_text(d, greatest(0, lim - used))));
        run.events := run.events + 1;
        marks := budget.consumption_marks_v2(d, used, lim, run.threshold_percent, run.crossed,
                                             run.exhausted);
        IF marks.crossed <> run.crossed THEN
            crossed := crossed || names[d];
        END IF;
        IF marks.exhausted <> run.exhausted THEN
            exhausted := exhausted || names[d];
        END IF;
        run.crossed := marks.crossed;
        run.exhausted := marks.exhausted;
        FOR e IN 1..cardinality(marks.types) LOOP
            events := events || budget.run_event_v2(run, marks.types[e], marks.payloads[e]);
            run.events := run.events + 1;
        END LOOP;
        CONTINUE WHEN used <= lim OR run.state <> 'active';
        IF NOT advisory THEN
            run.breached := run.breached | (1 << (d - 1));
            breached := breached || names[d];
            events := events || budget.run_event_v2(run, 'cap.breached', format(
                '{"kind":"%s","limit":%s,"observed":%s}', kinds[d],
                budget.amount_text(d, lim), budget.amount_text(d, used)));
            run.events := run.events + 1;
        END IF;
        first_breach := coalesce(first_breach, d);
    END LOOP;
    IF NOT advisory AND first_breach IS NOT NULL THEN
        used := run.used[first_breach];
        stop := budget.run_stop_v2(run, first_breach, run.lim[first_breach], used, used, 'run', '');
        run := stop.run;
        events := events || stop.events;
    END IF;
END;
$$;
