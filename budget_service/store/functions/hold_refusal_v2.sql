-- budget.hold_refusal_v2: Why a Consume or Release naming a hold is refused (NULL: it goes on).
--
-- A Release must name a hold, and the hold must be one of the run's (RESERVATION_NOT_FOUND);
-- a hold that was consumed cannot be settled again, and only an open hold can be released
-- (RESERVATION_SETTLED with its state). A Consume naming a released or expired hold is still
-- recorded, without it: the provider billed the call (DESIGN 3.3). Both write nothing.
CREATE OR REPLACE FUNCTION budget.hold_refusal_v2(
    item budget.decide_item_v2, hold budget.engine_hold_v2) RETURNS jsonb
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT CASE
        WHEN item.kind = 'release' AND item.reservation_id = '' THEN
            jsonb_build_object('reason', 'RESERVATION_NOT_FOUND')
        WHEN item.reservation_id = '' THEN NULL
        WHEN hold.reservation_id IS NULL THEN
            jsonb_build_object('reason', 'RESERVATION_NOT_FOUND')
        WHEN hold.state = 'consumed' OR (item.kind = 'release' AND hold.state <> 'open') THEN
            jsonb_build_object('reason', 'RESERVATION_SETTLED', 'state', hold.state)
    END
$$;
