-- budget.consume_item_v2: One Consume: actual usage recorded on its run and pool windows.
--
-- Never refused for being over budget: the provider already billed it (DESIGN 3.3). It settles
-- the named hold if still open (the remainder is released, usage above it is the overrun, and
-- the hold's model call is the call this records); a released or expired hold no longer
-- counts, and usage without a hold draws on the run's current pools. Only totals past the
-- bigint range refuse (VALIDATION_FAILED), before anything changes. The run's rules are
-- budget.consume_run_v2, each pool's budget.consume_pool_v2. `pools` are the rows the usage
-- lands on: the settled hold's, else the run's current windows its model matches.
CREATE OR REPLACE FUNCTION budget.consume_item_v2(
    item budget.decide_item_v2, amounts bigint[], INOUT run budget.engine_run_v2,
    INOUT pools budget.engine_pool_v2[], INOUT hold budget.engine_hold_v2, advisory boolean,
    OUT outcome text, OUT refusal jsonb, OUT tally jsonb, OUT overrun bigint[],
    OUT hold_state text, OUT ledger budget.engine_ledger_v2,
    OUT events budget.engine_event_v2[],
    OUT reason text, OUT advisory_reason text, OUT denied text)  -- (a Reserve's, unused)
LANGUAGE plpgsql STABLE PARALLEL SAFE AS $$
DECLARE
    fields constant text[] := ARRAY['tokens', 'cost_nanos', 'tool_calls', 'retries',
                                     'model_calls'];
    settles constant boolean := hold.reservation_id IS NOT NULL AND hold.state = 'open';
    g bigint[] := '{0,0,0,0,0}';
    usage bigint[] := amounts;
    r record; p record;
    pool_crossed text[] := '{}'; pool_exhausted text[] := '{}';
BEGIN
    refusal := budget.hold_refusal_v2(item, hold);
    IF refusal IS NOT NULL THEN
        outcome := 'refused';
        tally := CASE WHEN refusal ->> 'reason' = 'RESERVATION_SETTLED'
                      THEN jsonb_build_object('outcome', 'refused', 'reason',
                                              'RESERVATION_SETTLED')
                      ELSE '{}'::jsonb END;
        RETURN;
    END IF;
    overrun := '{0,0,0,0}';
    hold_state := CASE WHEN settles THEN 'consumed' ELSE hold.state END;
    IF settles THEN
        g := hold.granted;
        usage[5] := greatest(usage[5], g[5]);
    END IF;
    -- Totals past the bigint range refuse before anything changes.
    FOR d IN 1..4 LOOP
        IF g[d] > run.held[d] THEN
            RAISE EXCEPTION 'hold % settles more than its run holds', hold.reservation_id;
        END IF;
        IF run.used[d]::numeric + usage[d] > 9223372036854775807 THEN
            refusal := jsonb_build_object('reason', 'VALIDATION_FAILED',
                                          'field', 'usage.' || fields[d]);
        END IF;
        EXIT WHEN refusal IS NOT NULL;
    END LOOP;
    FOR b IN 1..CASE WHEN refusal IS NULL THEN coalesce(cardinality(pools), 0) ELSE 0 END LOOP
        CONTINUE WHEN NOT pools[b].found;
        FOR d IN 1..5 LOOP
            IF pools[b].used[d]::numeric + usage[d] > 9223372036854775807 THEN
                refusal := jsonb_build_object('reason', 'VALIDATION_FAILED',
                                              'field', 'usage.' || fields[d]);
            END IF;
            EXIT WHEN refusal IS NOT NULL;
        END LOOP;
        EXIT WHEN refusal IS NOT NULL;
    END LOOP;
    IF refusal IS NOT NULL THEN
        outcome := 'invalid';
        RETURN;
    END IF;
    r := budget.consume_run_v2(run, usage, g, advisory);
    run := r.run;
    events := r.events;
    IF settles THEN
        FOR d IN 1..4 LOOP
            overrun[d] := greatest(0, usage[d] - g[d]);
        END LOOP;
    END IF;
    FOR b IN 1..coalesce(cardinality(pools), 0) LOOP
        CONTINUE WHEN NOT pools[b].found;
        p := budget.consume_pool_v2(pools[b], usage, g, item.reservation_id);
        pools[b] := p.pool;
        events := events || p.events;
        pool_crossed := pool_crossed || p.crossed;
        pool_exhausted := pool_exhausted || p.exhausted;
    END LOOP;
    IF settles THEN
        hold.state := 'consumed';
    END IF;
    run.touched := true;
    ledger := ROW(run.run_id, item.request_id, 'consume', NULL::text,
                  nullif(item.reservation_id, ''), item.model, run.policy_version, usage,
                  ARRAY[-g[1], -g[2], -g[3], -g[4], -g[5]], budget.ledger_pools_v2(pools),
                  NULL::jsonb)::budget.engine_ledger_v2;
    outcome := 'done';
    tally := jsonb_build_object(
        'outcome', 'recorded', 'project', run.project_id,
        'ended', CASE WHEN settles THEN 'consumed' END,
        'crossed', to_jsonb(r.crossed), 'exhausted', to_jsonb(r.exhausted),
        'breached', to_jsonb(r.breached), 'overrun', to_jsonb(overrun),
        'pool_crossed', to_jsonb(pool_crossed), 'pool_exhausted', to_jsonb(pool_exhausted));
END;
$$;
