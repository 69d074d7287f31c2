-- budget.reserve_item_v2: One Reserve (or Check: the same judgment, read-only) decided
-- against its run and the pool windows it draws on, as the items before it left them.
--
-- The precedence (DESIGN 3.3): the run's state refuses first, in advisory mode too; then the
-- model policy (before any spend; advisory mode only reports it on a Reserve); then the
-- verdict of the estimate over the run and every pool (budget.reserve_verdict_v2), whose
-- refusal budget.reserve_refusal_v2 decides. A hard refusal writes a ledger 'refusal' row
-- (and a breach's events) but no hold and no stored reply. A grant opens a hold of what
-- budget.reserve_grant_v2 grants, held on the run and every pool, with a ledger 'grant' row
-- naming what advisory mode would have refused. A Check reports the same verdict and writes
-- nothing. Outputs: `outcome` (refused, invalid, checked, done), `refusal` its facts, `tally`
-- what metrics count (NULL: nothing), `reason`/`advisory_reason`/`denied` for the reply, and
-- the new run, pools, hold (NULL if none), ledger row (NULL if none) and events.
CREATE OR REPLACE FUNCTION budget.reserve_item_v2(
    item budget.decide_item_v2, amounts bigint[], INOUT run budget.engine_run_v2,
    INOUT pools budget.engine_pool_v2[], advisory boolean, now timestamptz,
    OUT outcome text, OUT refusal jsonb, OUT tally jsonb, OUT reason text,
    OUT advisory_reason text, OUT denied text, OUT hold budget.engine_hold_v2,
    OUT ledger budget.engine_ledger_v2, OUT events budget.engine_event_v2[],
    OUT overrun bigint[], OUT hold_state text)  -- (a Consume's, unused)
LANGUAGE plpgsql STABLE AS $$
DECLARE
    names constant text[] := ARRAY['tokens', 'cost', 'toolCalls', 'retries', 'modelCalls'];
    v budget.engine_verdict_v2; r record; g bigint[];
BEGIN
    events := '{}';
    refusal := budget.state_refusal_v2(run);
    reason := refusal ->> 'reason';
    IF item.model <> '' AND run.model_lists <> '[]'::jsonb THEN
        denied := budget.model_refused_by_v1(run.model_lists, item.model);
    END IF;
    IF reason IS NULL AND denied IS NOT NULL AND (NOT advisory OR item.kind = 'check') THEN
        reason := 'BUDGET_MODEL_DENIED';
        refusal := jsonb_build_object('reason', reason, 'model', item.model, 'scope', denied,
                                      'scope_id', budget.scope_id_of_v2(run, denied));
    END IF;
    IF reason IS NULL THEN
        v := budget.reserve_verdict_v2(amounts, item.up_to, run, pools);
        IF v.invalid IS NOT NULL THEN
            outcome := 'invalid';
            refusal := jsonb_build_object('reason', 'VALIDATION_FAILED', 'field', v.invalid);
            RETURN;
        END IF;
    END IF;
    IF item.kind = 'check' THEN
        reason := coalesce(reason, CASE WHEN v.breach_dim IS NOT NULL THEN 'BUDGET_EXHAUSTED'
                                        WHEN v.held_dim IS NOT NULL THEN 'BUDGET_HELD'
                                        ELSE '' END);
        advisory_reason := '';
        IF advisory AND reason IN ('BUDGET_MODEL_DENIED', 'BUDGET_EXHAUSTED', 'BUDGET_HELD') THEN
            advisory_reason := reason;
            reason := '';
        END IF;
        outcome := 'checked';
        refusal := NULL;
        tally := jsonb_build_object(
            'outcome', CASE WHEN reason <> '' THEN 'refused'
                            WHEN advisory_reason <> '' THEN 'advisory_refused'
                            ELSE 'granted' END,
            'reason', CASE WHEN reason <> '' THEN reason ELSE advisory_reason END);
        RETURN;
    END IF;
    IF reason IS NULL THEN
        r := budget.reserve_refusal_v2(run, pools, v, advisory, now);
        run := r.run;
        refusal := r.facts;
        events := r.events;
        reason := refusal ->> 'reason';
    END IF;
    IF reason IS NOT NULL THEN
        outcome := 'refused';
        ledger := ROW(run.run_id, item.request_id, 'refusal', reason, NULL::text, item.model,
                      run.policy_version, '{0,0,0,0,0}'::bigint[], '{0,0,0,0,0}'::bigint[],
                      '[]'::jsonb,
                      jsonb_build_object('requested', jsonb_build_object(
                          'tokens', amounts[1], 'cost', amounts[2], 'toolCalls', amounts[3],
                          'retries', amounts[4])))::budget.engine_ledger_v2;
        tally := jsonb_build_object(
            'outcome', 'refused', 'reason', reason,
            'scope', coalesce(refusal ->> 'scope', 'run'),
            'events', budget.run_event_types_v2(events))
            || CASE WHEN v.breach_dim IS NULL THEN '{}'::jsonb
                    ELSE jsonb_build_object('breach_dim', names[v.breach_dim]) END;
        RETURN;
    END IF;
    -- Granted: the full estimate in advisory mode, else all or nothing / UP_TO.
    refusal := NULL;
    advisory_reason := CASE WHEN denied IS NOT NULL THEN 'BUDGET_MODEL_DENIED'
                            WHEN v.breach_dim IS NOT NULL THEN 'BUDGET_EXHAUSTED'
                            WHEN v.held_dim IS NOT NULL THEN 'BUDGET_HELD' ELSE '' END;
    g := budget.reserve_grant_v2(amounts, item.up_to, advisory, run, pools);
    hold := ROW(item.reservation_id, NULL::integer, item.model, 'open', false, true,
                amounts[1:4], g, NULL::integer[], now,
                now + make_interval(secs => item.ttl_seconds),
                run.policy_version)::budget.engine_hold_v2;
    FOR d IN 1..4 LOOP
        run.held[d] := run.held[d] + g[d];
    END LOOP;
    FOR b IN 1..coalesce(cardinality(pools), 0) LOOP
        pools[b].touched := true;
        FOR d IN 1..5 LOOP
            pools[b].held[d] := pools[b].held[d] + g[d];
        END LOOP;
    END LOOP;
    run.advisory_refusals := run.advisory_refusals
                             + CASE WHEN advisory_reason <> '' THEN 1 ELSE 0 END;
    run.touched := true;
    ledger := ROW(run.run_id, item.request_id, 'grant', nullif(advisory_reason, ''),
                  item.reservation_id, item.model, run.policy_version, '{0,0,0,0,0}'::bigint[],
                  g, budget.ledger_pools_v2(pools), NULL::jsonb)::budget.engine_ledger_v2;
    outcome := 'done';
    tally := jsonb_build_object(
        'outcome', CASE WHEN advisory_reason <> '' THEN 'advisory_refused' ELSE 'granted' END,
        'reason', advisory_reason, 'opened', 1)
        || CASE WHEN v.breach_dim IS NULL THEN '{}'::jsonb
                ELSE jsonb_build_object('breach_dim', names[v.breach_dim]) END;
END;
$$;
