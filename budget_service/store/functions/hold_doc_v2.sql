-- budget.hold_doc_v2: A hold as a reply shows it (store/stored_replies.py): amounts of the four
-- run dimensions, its model call apart, its pool rows as [scope, scope_id, window_start] and
-- its times in epoch microseconds.
CREATE OR REPLACE FUNCTION budget.hold_doc_v2(
    run_id text, hold budget.engine_hold_v2, pools budget.engine_pool_v2[]) RETURNS json
LANGUAGE plpgsql STABLE PARALLEL SAFE AS $$
DECLARE
    rows text := '';
BEGIN
    FOR b IN 1..coalesce(cardinality(pools), 0) LOOP
        rows := rows || CASE WHEN b = 1 THEN '' ELSE ',' END || json_build_array(
            pools[b].scope, pools[b].scope_id, budget.epoch_us(pools[b].window_start))::text;
    END LOOP;
    RETURN json_build_object(
        'id', hold.reservation_id, 'run', run_id, 'model', hold.model,
        'requested', hold.requested[1:4], 'granted', hold.granted[1:4], 'state', hold.state,
        'pools', ('[' || rows || ']')::json, 'created_us', budget.epoch_us(hold.created_at),
        'expires_us', budget.epoch_us(hold.expires_at), 'model_calls', hold.granted[5]);
END;
$$;
