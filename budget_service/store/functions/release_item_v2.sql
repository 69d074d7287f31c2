-- budget.release_item_v2: One Release: the named open hold is voided (DESIGN 3.3), its amounts
-- stop counting on the run and its pool rows (budget.hold_end_v2), and a ledger 'release' row
-- records it. A hold not found, or no longer open, is refused (budget.hold_refusal_v2).
CREATE OR REPLACE FUNCTION budget.release_item_v2(
    item budget.decide_item_v2, INOUT run budget.engine_run_v2,
    INOUT pools budget.engine_pool_v2[], INOUT hold budget.engine_hold_v2,
    OUT outcome text, OUT refusal jsonb, OUT tally jsonb, OUT ledger budget.engine_ledger_v2,
    -- The other item kinds' outputs, unused here: every kind answers the same fields.
    OUT events budget.engine_event_v2[], OUT overrun bigint[], OUT hold_state text,
    OUT reason text, OUT advisory_reason text, OUT denied text)
LANGUAGE plpgsql STABLE PARALLEL SAFE AS $$
DECLARE
    ended record;
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
    ended := budget.hold_end_v2(run, pools, hold, 'released', item.request_id);
    run := ended.run;
    pools := ended.pools;
    hold := ended.hold;
    ledger := ended.ledger;
    outcome := 'done';
    tally := jsonb_build_object('outcome', 'recorded', 'ended', 'released');
END;
$$;
