-- Running totals never leave the bigint range (DESIGN 3.6, 5). budget.reserve and
-- budget.consume of migration 0003, unchanged but for two guards: an estimate that would take
-- a held total, or a usage that would take a consumed total, past 2^63 - 1 answers 'slow'
-- (having written nothing), and the Python path refuses it as VALIDATION_FAILED
-- (accounting.ensure_total_fits); and Reserve compares consumed + held + need in numeric, since
-- consumed may already sit near the edge. Without them such a call failed on "bigint out of
-- range" and reached the caller as INTERNAL. Amounts are at most 10^18 (validation.py), so the
-- subtractions in the guards cannot overflow.

-- Reserve (reservations_locked.LockedReservations.reserve, accounting.decide_reserve): grants
-- when the run is ACTIVE, hard-enforced, the model is allowed and every requested bounded
-- dimension fits (consumed + held + need <= limit; need is 1 for UP_TO tokens and cost, which
-- are then granted up to what is left). A breach or contention refuses: the Python path's.
CREATE OR REPLACE FUNCTION budget.reserve(
    p_tenant text, p_request_id text, p_fingerprint bytea, p_run_id text,
    p_reservation_id text, p_model text, p_estimate bigint[], p_up_to boolean,
    p_ttl_seconds integer, p_host_advisory boolean,
    OUT outcome text, OUT response bytea, OUT tally jsonb)
LANGUAGE plpgsql AS $$
DECLARE
    r record;  -- the locked run's columns, its stored reply and whether a hold is overdue
    lim bigint[];
    used bigint[];
    held bigint[];
    granted bigint[] := ARRAY[0, 0, 0, 0];
    need bigint;
BEGIN
    SELECT u.*, l.fingerprint AS stored_fingerprint, l.response AS stored_response,
           EXISTS (SELECT 1 FROM budget.holds o
                   WHERE o.tenant_id = p_tenant AND o.run_id = p_run_id
                     AND o.state = 'open' AND o.expires_at <= now()) AS overdue
    INTO r
    FROM budget.runs u
    LEFT JOIN budget.request_log l ON l.tenant_id = p_tenant AND l.request_id = p_request_id
    WHERE u.tenant_id = p_tenant AND u.run_id = p_run_id
    FOR UPDATE OF u;
    IF NOT FOUND THEN
        outcome := 'not_found';
        RETURN;
    END IF;
    IF r.stored_fingerprint IS NOT NULL THEN
        outcome := CASE WHEN r.stored_fingerprint = p_fingerprint THEN 'replay' ELSE 'reused' END;
        response := CASE WHEN r.stored_fingerprint = p_fingerprint THEN r.stored_response END;
        RETURN;
    END IF;
    IF r.overdue OR cardinality(r.pool_scopes) > 0 OR r.state <> 'active'
       OR p_host_advisory OR r.scope_advisory
       OR (p_model <> '' AND r.model_lists <> '[]'
           AND NOT budget.model_allowed(r.model_lists, p_model)) THEN
        outcome := 'slow';
        RETURN;
    END IF;
    lim := ARRAY[r.max_tokens, r.max_cost_nanos, r.max_tool_calls, r.max_retries];
    used := ARRAY[r.consumed_tokens, r.consumed_cost_nanos, r.consumed_tool_calls,
                  r.consumed_retries];
    held := ARRAY[r.held_tokens, r.held_cost_nanos, r.held_tool_calls, r.held_retries];
    FOR i IN 1..4 LOOP
        CONTINUE WHEN p_estimate[i] <= 0;
        IF held[i] > 9223372036854775807 - p_estimate[i] THEN  -- VALIDATION_FAILED
            outcome := 'slow';
            RETURN;
        END IF;
        granted[i] := p_estimate[i];
        CONTINUE WHEN lim[i] IS NULL;
        need := CASE WHEN p_up_to AND i <= 2 THEN 1 ELSE p_estimate[i] END;
        IF used[i]::numeric + held[i] + need > lim[i] THEN  -- contention, or a breach
            outcome := 'slow';
            RETURN;
        END IF;
        IF p_up_to AND i <= 2 THEN
            granted[i] := least(p_estimate[i], lim[i] - used[i] - held[i]);
        END IF;
    END LOOP;
    WITH hold AS (
        INSERT INTO budget.holds AS h (
            tenant_id, run_id, reservation_id, model,
            requested_tokens, requested_cost_nanos, requested_tool_calls, requested_retries,
            granted_tokens, granted_cost_nanos, granted_tool_calls, granted_retries,
            pool_scopes, pool_scope_ids, pool_windows, state, policy_version, created_at,
            expires_at)
        VALUES (
            p_tenant, p_run_id, p_reservation_id, p_model,
            p_estimate[1], p_estimate[2], p_estimate[3], p_estimate[4],
            granted[1], granted[2], granted[3], granted[4],
            '{}', '{}', '{}', 'open', r.policy_version, now(),
            now() + make_interval(secs => p_ttl_seconds))
        RETURNING h
    ), run AS (
        UPDATE budget.runs AS u SET
            held_tokens = held_tokens + granted[1],
            held_cost_nanos = held_cost_nanos + granted[2],
            held_tool_calls = held_tool_calls + granted[3],
            held_retries = held_retries + granted[4],
            updated_at = now()
        WHERE tenant_id = p_tenant AND run_id = p_run_id
        RETURNING u
    ), ledger AS (
        INSERT INTO budget.ledger (
            tenant_id, run_id, request_id, decision, reservation_id, model, policy_version,
            held_tokens, held_cost_nanos, held_tool_calls, held_retries)
        VALUES (
            p_tenant, p_run_id, p_request_id, 'grant', p_reservation_id, p_model,
            r.policy_version, granted[1], granted[2], granted[3], granted[4])
    ), reply AS (
        SELECT convert_to(json_build_object(
            'hold', budget.hold_reply(hold.h), 'dimensions', budget.run_statuses(run.u),
            'advisory_reason', '')::text, 'UTF8') AS data
        FROM hold, run
    ), logged AS (
        INSERT INTO budget.request_log (tenant_id, request_id, fingerprint, response)
        SELECT p_tenant, p_request_id, p_fingerprint, reply.data FROM reply
    )
    SELECT reply.data INTO response FROM reply;
    outcome := 'done';
END;
$$;

-- Consume (LockedReservations.consume, accounting.apply_consume) without a hold, settling an
-- open one, or recording usage meant for a released or expired one; emits budget.consumed,
-- threshold.crossed and exhausted exactly as events.py renders them. Usage that would leave an
-- ACTIVE run's consumed above its limit is a breach: the Python path's.
CREATE OR REPLACE FUNCTION budget.consume(
    p_tenant text, p_request_id text, p_fingerprint bytea, p_run_id text,
    p_reservation_id text, p_model text, p_usage bigint[],
    OUT outcome text, OUT response bytea, OUT tally jsonb)
LANGUAGE plpgsql AS $$
DECLARE
    names constant text[] := ARRAY['tokens', 'cost', 'toolCalls', 'retries'];
    r record;  -- the locked run's columns, its stored reply, overdue holds, the named hold
    settles boolean := false;
    hold_state text;
    lim bigint[];
    used bigint[];
    held bigint[];
    granted bigint[] := ARRAY[0, 0, 0, 0];
    overrun bigint[] := ARRAY[0, 0, 0, 0];
    v_crossed text[];
    v_exhausted text[];
    new_crossed text[] := '{}';
    new_exhausted text[] := '{}';
    types text[] := '{}';
    payloads text[] := '{}';
    name text;
    ended integer;
    notices integer;  -- read so that the notifying CTE runs
BEGIN
    SELECT u.*, l.fingerprint AS stored_fingerprint, l.response AS stored_response,
           EXISTS (SELECT 1 FROM budget.holds o
                   WHERE o.tenant_id = p_tenant AND o.run_id = p_run_id
                     AND o.state = 'open' AND o.expires_at <= now()) AS overdue,
           k.reservation_id AS hold_id, k.model AS hold_model, k.state AS hold_state,
           k.granted_tokens AS hold_tokens, k.granted_cost_nanos AS hold_cost_nanos,
           k.granted_tool_calls AS hold_tool_calls, k.granted_retries AS hold_retries
    INTO r
    FROM budget.runs u
    LEFT JOIN budget.request_log l ON l.tenant_id = p_tenant AND l.request_id = p_request_id
    LEFT JOIN budget.holds k ON k.tenant_id = p_tenant AND k.run_id = p_run_id
                            AND k.reservation_id = p_reservation_id
    WHERE u.tenant_id = p_tenant AND u.run_id = p_run_id
    FOR UPDATE OF u;
    IF NOT FOUND THEN
        outcome := 'not_found';
        RETURN;
    END IF;
    IF r.stored_fingerprint IS NOT NULL THEN
        outcome := CASE WHEN r.stored_fingerprint = p_fingerprint THEN 'replay' ELSE 'reused' END;
        response := CASE WHEN r.stored_fingerprint = p_fingerprint THEN r.stored_response END;
        RETURN;
    END IF;
    IF r.overdue OR cardinality(r.pool_scopes) > 0 THEN
        outcome := 'slow';
        RETURN;
    END IF;
    IF p_reservation_id <> '' THEN
        IF r.hold_id IS NULL OR r.hold_state = 'consumed' THEN  -- NOT_FOUND or SETTLED
            outcome := 'slow';
            RETURN;
        END IF;
        settles := r.hold_state = 'open';
        hold_state := CASE WHEN settles THEN 'consumed' ELSE r.hold_state END;
        IF settles THEN
            granted := ARRAY[r.hold_tokens, r.hold_cost_nanos, r.hold_tool_calls,
                             r.hold_retries];
        END IF;
    END IF;
    lim := ARRAY[r.max_tokens, r.max_cost_nanos, r.max_tool_calls, r.max_retries];
    used := ARRAY[r.consumed_tokens, r.consumed_cost_nanos, r.consumed_tool_calls,
                  r.consumed_retries];
    held := ARRAY[r.held_tokens, r.held_cost_nanos, r.held_tool_calls, r.held_retries];
    v_crossed := r.crossed;
    v_exhausted := r.exhausted;
    FOR i IN 1..4 LOOP
        IF granted[i] > held[i] THEN  -- a hold settled twice: a bug the Python path reports
            outcome := 'slow';
            RETURN;
        END IF;
        IF p_usage[i] > 9223372036854775807 - used[i] THEN  -- VALIDATION_FAILED
            outcome := 'slow';
            RETURN;
        END IF;
        used[i] := used[i] + p_usage[i];
        held[i] := held[i] - granted[i];
        IF settles THEN
            overrun[i] := greatest(0, p_usage[i] - granted[i]);
        END IF;
        CONTINUE WHEN p_usage[i] = 0 OR lim[i] IS NULL;
        IF used[i] > lim[i] AND r.state = 'active' THEN  -- a breach
            outcome := 'slow';
            RETURN;
        END IF;
        name := names[i];
        types := types || 'budget.consumed'::text;
        payloads := payloads || format(
            '{"dimension":"%s","consumed":%s,"limit":%s,"remaining":%s}',
            name, budget.amount_text(i, used[i]), budget.amount_text(i, lim[i]),
            budget.amount_text(i, greatest(0, lim[i] - used[i])));
        IF NOT name = ANY(v_crossed) AND used[i] > 0
           AND used[i]::numeric * 100 >= lim[i]::numeric * r.threshold_percent THEN
            v_crossed := v_crossed || name;
            new_crossed := new_crossed || name;
            types := types || 'budget.threshold.crossed'::text;
            payloads := payloads || format(
                '{"dimension":"%s","consumed":%s,"limit":%s,"percent":%s}',
                name, budget.amount_text(i, used[i]), budget.amount_text(i, lim[i]),
                r.threshold_percent);
        END IF;
        IF NOT name = ANY(v_exhausted) AND used[i] >= lim[i] THEN
            v_exhausted := v_exhausted || name;
            new_exhausted := new_exhausted || name;
            types := types || 'budget.exhausted'::text;
            payloads := payloads || format('{"dimension":"%s","consumed":%s,"limit":%s}',
                name, budget.amount_text(i, used[i]), budget.amount_text(i, lim[i]));
        END IF;
    END LOOP;
    WITH run AS (
        UPDATE budget.runs AS u SET
            consumed_tokens = used[1], consumed_cost_nanos = used[2],
            consumed_tool_calls = used[3], consumed_retries = used[4],
            held_tokens = held[1], held_cost_nanos = held[2],
            held_tool_calls = held[3], held_retries = held[4],
            crossed = ARRAY(SELECT d FROM unnest(v_crossed) d ORDER BY d COLLATE "C"),
            exhausted = ARRAY(SELECT d FROM unnest(v_exhausted) d ORDER BY d COLLATE "C"),
            next_seq = r.next_seq + cardinality(types), updated_at = now()
        WHERE tenant_id = p_tenant AND run_id = p_run_id
        RETURNING u
    ), hold_end AS (
        UPDATE budget.holds SET state = 'consumed', ended_at = now()
        WHERE settles AND tenant_id = p_tenant AND run_id = p_run_id
          AND reservation_id = p_reservation_id AND state = 'open'
        RETURNING 1
    ), ledger AS (
        INSERT INTO budget.ledger (
            tenant_id, run_id, request_id, decision, reservation_id, model, policy_version,
            consumed_tokens, consumed_cost_nanos, consumed_tool_calls, consumed_retries,
            held_tokens, held_cost_nanos, held_tool_calls, held_retries)
        VALUES (
            p_tenant, p_run_id, p_request_id, 'consume', nullif(p_reservation_id, ''), p_model,
            r.policy_version, p_usage[1], p_usage[2], p_usage[3], p_usage[4],
            -granted[1], -granted[2], -granted[3], -granted[4])
    ), events AS (
        INSERT INTO budget.events (tenant_id, run_id, seq, type, payload_json, created_at)
        SELECT p_tenant, p_run_id, r.next_seq + e.n - 1, e.type, e.payload, now()
        FROM unnest(types, payloads) WITH ORDINALITY AS e(type, payload, n)
        RETURNING seq
    ), notified AS (  -- watchers.py: registering waits for this run's lock, held until here
        SELECT pg_notify('ration_budget_events',
                         json_build_array(p_tenant, p_run_id, max(seq))::text)
        FROM events
        WHERE EXISTS (SELECT 1 FROM budget.watchers w
                      WHERE w.tenant_id = p_tenant AND w.run_id = p_run_id)
        HAVING count(*) > 0
    ), reply AS (
        SELECT convert_to(json_build_object(
            'overrun', overrun, 'dimensions', budget.run_statuses(run.u),
            'state', (run.u).state, 'hold_state', hold_state)::text, 'UTF8') AS data
        FROM run
    ), logged AS (
        INSERT INTO budget.request_log (tenant_id, request_id, fingerprint, response)
        SELECT p_tenant, p_request_id, p_fingerprint, reply.data FROM reply
    )
    SELECT reply.data, (SELECT count(*) FROM hold_end), (SELECT count(*) FROM notified)
    INTO response, ended, notices FROM reply;
    IF settles AND ended <> 1 THEN  -- the hold ended while this call waited for the run
        RAISE EXCEPTION 'hold % ended concurrently', p_reservation_id
            USING ERRCODE = 'serialization_failure';
    END IF;
    outcome := 'done';
    tally := jsonb_build_object(
        'project', r.project_id, 'crossed', new_crossed, 'exhausted', new_exhausted);
END;
$$;
