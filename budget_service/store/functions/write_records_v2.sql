-- budget.write_records_v2: What the batch appends and ends: holds that ended here, new holds,
-- ledger rows (in decision order), run and pool events, the request log rows of the done
-- items; then a notification for each watched run with new events.
--
-- Each ended hold is one UPDATE guarded by ended_at IS NULL (a primary-key lookup), so a hold
-- never ends twice: if another transaction ended it, the batch fails as a serialization
-- failure and is run again. The guard is ended_at IS NULL, not state = 'open' (the same rows,
-- CHECK of migration 0002): under state = 'open' the partial indexes of open holds qualify,
-- and a plan made on empty tables probed the tenant's open holds by expiry with the tenant
-- alone, walking all of them on each Consume and Release (issue 23); only the primary key
-- fits this guard (the upkeep index needs both, migration 0020). Inserts are set-based from the batch's arrays (no table read).
-- WatchRunEvents (store/watchers.py): registering waits for the run's lock, held here.
CREATE OR REPLACE FUNCTION budget.write_records_v2(
    tenant text, runs budget.engine_run_v2[], pools budget.engine_pool_v2[],
    holds budget.engine_hold_v2[], ledger budget.engine_ledger_v2[],
    events budget.engine_event_v2[], replies text[], fingerprints bytea[],
    responses bytea[], now timestamptz)
RETURNS void
LANGUAGE plpgsql AS $$
#variable_conflict use_variable
DECLARE
    h budget.engine_hold_v2;
    n integer;
BEGIN
    FOREACH h IN ARRAY holds LOOP
        CONTINUE WHEN NOT h.was_open OR h.state = 'open';
        UPDATE budget.holds SET state = h.state, ended_at = now
        WHERE tenant_id = tenant AND run_id = runs[h.run].run_id
          AND reservation_id = h.reservation_id AND ended_at IS NULL;
        GET DIAGNOSTICS n = ROW_COUNT;
        IF n <> 1 THEN
            RAISE EXCEPTION 'a hold ended concurrently' USING ERRCODE = 'serialization_failure';
        END IF;
    END LOOP;
    INSERT INTO budget.holds (
        tenant_id, run_id, reservation_id, model,
        requested_tokens, requested_cost_nanos, requested_tool_calls, requested_retries,
        granted_tokens, granted_cost_nanos, granted_tool_calls, granted_retries,
        granted_model_calls, pool_scopes, pool_scope_ids, pool_windows, state, policy_version,
        created_at, expires_at, ended_at)
    SELECT tenant, runs[x.run].run_id, x.reservation_id, x.model,
           x.requested[1], x.requested[2], x.requested[3], x.requested[4],
           x.granted[1], x.granted[2], x.granted[3], x.granted[4], x.granted[5],
           ARRAY(SELECT pools[m].scope FROM unnest(x.pools) WITH ORDINALITY AS s(m, o)
                 ORDER BY s.o)::text[],
           ARRAY(SELECT pools[m].scope_id FROM unnest(x.pools) WITH ORDINALITY AS s(m, o)
                 ORDER BY s.o)::text[],
           ARRAY(SELECT pools[m].window_start FROM unnest(x.pools) WITH ORDINALITY AS s(m, o)
                 ORDER BY s.o)::timestamptz[],
           x.state, x.policy_version, x.created_at, x.expires_at,
           CASE WHEN x.state = 'open' THEN NULL ELSE now END
    FROM unnest(holds) WITH ORDINALITY AS x
    WHERE x.is_new
    ORDER BY x.ordinality;
    INSERT INTO budget.ledger (
        tenant_id, run_id, request_id, decision, reason, reservation_id, model,
        policy_version, consumed_tokens, consumed_cost_nanos, consumed_tool_calls,
        consumed_retries, held_tokens, held_cost_nanos, held_tool_calls, held_retries,
        consumed_model_calls, held_model_calls, pools, detail, created_at)
    SELECT tenant, x.run_id, x.request_id, x.decision, x.reason, x.reservation_id, x.model,
           x.policy_version, x.consumed[1], x.consumed[2], x.consumed[3], x.consumed[4],
           x.held[1], x.held[2], x.held[3], x.held[4], x.consumed[5], x.held[5], x.pools,
           x.detail, now
    FROM unnest(ledger) WITH ORDINALITY AS x
    ORDER BY x.ordinality;
    INSERT INTO budget.request_log (tenant_id, request_id, fingerprint, response)
    SELECT tenant, x.req, x.fp, x.resp
    FROM unnest(replies, fingerprints, responses) AS x(req, fp, resp);
    IF coalesce(cardinality(events), 0) = 0 THEN
        RETURN;
    END IF;
    INSERT INTO budget.events (tenant_id, run_id, seq, type, payload_json, created_at)
    SELECT tenant, x.run_id, x.seq, x.type, x.payload, now
    FROM unnest(events) x WHERE x.run_id IS NOT NULL;
    INSERT INTO budget.pool_events (
        tenant_id, scope, scope_id, window_start, seq, type, payload_json, created_at)
    SELECT tenant, x.scope, x.scope_id, x.window_start, x.seq, x.type, x.payload, now
    FROM unnest(events) x WHERE x.run_id IS NULL;
    PERFORM pg_notify('ration_budget_events',
                      json_build_array(tenant, x.run_id, max(x.seq))::text)
    FROM unnest(events) x
    WHERE x.run_id IS NOT NULL AND EXISTS (
        SELECT FROM budget.watchers w WHERE w.tenant_id = tenant AND w.run_id = x.run_id)
    GROUP BY x.run_id;
END;
$$;
