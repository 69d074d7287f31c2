-- budget.reply_v2: The reply document of a decided item (store/stored_replies.py decodes it;
-- it is stored in the request log, and a retried request id replays it byte for byte).
--
-- Reserve: the hold, the balances and what advisory mode would have refused. Consume: the
-- overrun, the balances, the run's state and the hold's. Release: the hold. Check: the verdict
-- (reason, advisory_reason), the run's state, the balances and the model verdict (denied_by is
-- null when the call names no model, '' when the model is allowed).
CREATE OR REPLACE FUNCTION budget.reply_v2(
    kind text, run budget.engine_run_v2, run_pools budget.engine_pool_v2[],
    hold budget.engine_hold_v2, hold_pools budget.engine_pool_v2[], reason text,
    advisory_reason text, denied text, model text, overrun bigint[], hold_state text)
RETURNS bytea
LANGUAGE plpgsql STABLE PARALLEL SAFE AS $$
BEGIN
    IF kind = 'check' THEN
        RETURN convert_to(json_build_object(
            'reason', reason, 'advisory_reason', advisory_reason, 'state', run.state,
            'dimensions', budget.reply_dimensions_v2(run, run_pools),
            'denied_by', CASE WHEN model = '' THEN NULL ELSE coalesce(denied, '') END,
            'denied_by_id', budget.scope_id_of_v2(run, denied))::text, 'UTF8');
    ELSIF kind = 'consume' THEN
        RETURN convert_to(json_build_object(
            'overrun', overrun, 'dimensions', budget.reply_dimensions_v2(run, run_pools),
            'state', run.state, 'hold_state', hold_state)::text, 'UTF8');
    ELSIF kind = 'reserve' THEN
        RETURN convert_to(json_build_object(
            'hold', budget.hold_doc_v2(run.run_id, hold, hold_pools),
            'dimensions', budget.reply_dimensions_v2(run, run_pools),
            'advisory_reason', advisory_reason)::text, 'UTF8');
    END IF;
    RETURN convert_to(json_build_object(
        'hold', budget.hold_doc_v2(run.run_id, hold, hold_pools))::text, 'UTF8');
END;
$$;
