-- The per-call protocol in one round trip. Reserve, Consume and Release each run as one
-- statement (autocommit: no BEGIN/COMMIT round trips, and the run row is locked only while
-- Postgres works, never while a client or a Python process is scheduled). The functions decide
-- the common cases exactly as the Python domain does (budget_service/accounting.py and
-- policy.py are the specification; tests/integration/test_budget_fast_path.py checks that both
-- agree) and answer 'slow', having written nothing, for everything else: pools, overdue holds,
-- advisory enforcement, refusals, breaches and unusual holds are judged by the Python path.
--
-- Each function answers (outcome, response, tally):
--   done       the effect and its reply are committed; response is the stored reply
--   replay     the request id was already applied; response is its stored reply
--   reused     the request id was used with another payload (REQUEST_ID_REUSED)
--   not_found  no such run for this tenant (RUN_NOT_FOUND)
--   slow       nothing was written: run the call on the Python path
-- Replies are JSON documents (budget_service/replies.py), stored in request_log.response by
-- both paths.
--
-- Each function runs two statements: one reads the stored reply, the run (locked, first, as
-- every writer does), the named hold and whether any hold is overdue; one writes everything.
-- The first reads its subqueries in the snapshot taken before it waited for the lock, so:
-- a twin request that committed meanwhile makes the final request_log INSERT fail with
-- unique_violation (the statement rolls back; the caller retries and replays the twin's
-- reply); a hold that ended meanwhile makes the guarded hold UPDATE miss, and the function
-- raises serialization_failure (rolled back and retried); an overdue hold missed is expired
-- by the next call or the sweeper, exactly as on the Python path (store.py, _LOCK_RUN).
--
-- Dimension order everywhere: tokens, cost, toolCalls, retries (budget_service.policy).

-- Runs that some process follows with WatchRunEvents (budget_service/watchers.py). Consume
-- sends its NOTIFY only for a watched run: PostgreSQL serializes every notifying commit on one
-- cluster-wide lock held until the commit is flushed. Unlogged: rows are refreshed by their
-- process, purged by the sweeper when stale, and written again after a crash.
CREATE UNLOGGED TABLE budget.watchers (
    tenant_id text NOT NULL,
    run_id text NOT NULL,
    hub_id text NOT NULL,
    seen_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, run_id, hub_id)
);

-- Small SQL helpers are written to be inlined into the statements that use them (one SELECT
-- expression, no STRICT, volatility no stricter than their body): a call that is not inlined
-- costs tens of microseconds, and a SQL function with a FROM clause is planned on every call.

-- Exact USD text of a nanos amount, as events.usd_text: 1020000000 -> 1.02, 10^9 -> 1.0.
CREATE FUNCTION budget.usd_text(nanos bigint) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT (nanos / 1000000000)::text || '.'
        || coalesce(nullif(rtrim(lpad((nanos % 1000000000)::text, 9, '0'), '0'), ''), '0')
$$;

-- An amount as its JSON number text (events.render_amount): cost in USD, others integers.
CREATE FUNCTION budget.amount_text(dimension integer, amount bigint) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN dimension = 2 THEN budget.usd_text(amount) ELSE amount::text END
$$;

-- policy.glob_matches: exact and case-sensitive, `*` matches any run (LIKE with `*` as `%`).
CREATE FUNCTION budget.glob_matches(pattern text, model text) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT model LIKE replace(replace(replace(replace(
        pattern, '\', '\\'), '%', '\%'), '_', '\_'), '*', '%')
$$;

-- policy.model_verdict(...).allowed over the run's stored model lists: no deny list matches,
-- and every declared allow list does. (PL/pgSQL: its queries' plans are cached.)
CREATE FUNCTION budget.model_allowed(lists jsonb, model text) RETURNS boolean
LANGUAGE plpgsql STABLE PARALLEL SAFE AS $$
BEGIN
    RETURN NOT EXISTS (
        SELECT 1 FROM jsonb_array_elements(lists) e, jsonb_array_elements_text(e -> 'deny') g
        WHERE budget.glob_matches(g, model))
    AND NOT EXISTS (
        SELECT 1 FROM jsonb_array_elements(lists) e
        WHERE jsonb_typeof(e -> 'allow') = 'array'
          AND NOT EXISTS (SELECT 1 FROM jsonb_array_elements_text(e -> 'allow') g
                          WHERE budget.glob_matches(g, model)));
END;
$$;

-- records.run_statuses as reply rows [dimension, limit, consumed, held, scope, scope_id,
-- clamped_by]: the scope whose limit binds each dimension, a host ceiling reported as the run.
CREATE FUNCTION budget.binding_scope(r budget.runs, dimension text) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT CASE coalesce(r.binding ->> dimension, 'run')
        WHEN 'host' THEN 'run' ELSE coalesce(r.binding ->> dimension, 'run') END
$$;

CREATE FUNCTION budget.run_status(
    r budget.runs, dimension text, lim bigint, used bigint, held bigint) RETURNS json
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT json_build_array(
        dimension, lim, used, held, budget.binding_scope(r, dimension),
        CASE budget.binding_scope(r, dimension) WHEN 'workflow' THEN r.workflow_id
            WHEN 'agent' THEN r.agent_id WHEN 'project' THEN r.project_id ELSE '' END,
        CASE WHEN r.binding ->> dimension = 'host' THEN 'host' ELSE '' END)
$$;

CREATE FUNCTION budget.run_statuses(r budget.runs) RETURNS json
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT json_build_array(
        budget.run_status(r, 'tokens', r.max_tokens, r.consumed_tokens, r.held_tokens),
        budget.run_status(r, 'cost', r.max_cost_nanos, r.consumed_cost_nanos, r.held_cost_nanos),
        budget.run_status(r, 'toolCalls', r.max_tool_calls, r.consumed_tool_calls,
                          r.held_tool_calls),
        budget.run_status(r, 'retries', r.max_retries, r.consumed_retries, r.held_retries))
$$;

CREATE FUNCTION budget.epoch_us(t timestamptz) RETURNS bigint
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT (extract(epoch FROM t) * 1000000)::bigint
$$;

-- The reply document of a hold (replies.hold_doc).
CREATE FUNCTION budget.hold_reply(h budget.holds) RETURNS json
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT json_build_object(
        'id', h.reservation_id, 'run', h.run_id, 'model', h.model,
        'requested', json_build_array(h.requested_tokens, h.requested_cost_nanos,
                                      h.requested_tool_calls, h.requested_retries),
        'granted', json_build_array(h.granted_tokens, h.granted_cost_nanos,
                                    h.granted_tool_calls, h.granted_retries),
        'state', h.state, 'pools', json_build_array(),
        'created_us', budget.epoch_us(h.created_at), 'expires_us', budget.epoch_us(h.expires_at))
$$;

-- Reserve (reservations_locked.LockedReservations.reserve, accounting.decide_reserve): grants
-- when the run is ACTIVE, hard-enforced, the model is allowed and every requested bounded
-- dimension fits (consumed + held + need <= limit; need is 1 for UP_TO tokens and cost, which
-- are then granted up to what is left). A breach or contention refuses: the Python path's.
CREATE FUNCTION budget.reserve(
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
        granted[i] := p_estimate[i];
        CONTINUE WHEN lim[i] IS NULL;
        need := CASE WHEN p_up_to AND i <= 2 THEN 1 ELSE p_estimate[i] END;
        IF used[i] + held[i] + need > lim[i] THEN  -- contention, or a breach
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
CREATE FUNCTION budget.consume(
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

-- Release (LockedReservations.release) of an open hold that is not past its expiry.
CREATE FUNCTION budget.release(
    p_tenant text, p_request_id text, p_fingerprint bytea, p_run_id text,
    p_reservation_id text,
    OUT outcome text, OUT response bytea, OUT tally jsonb)
LANGUAGE plpgsql AS $$
DECLARE
    r record;  -- the locked run's columns, its stored reply, overdue holds, the named hold
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
    IF r.overdue OR cardinality(r.pool_scopes) > 0
       OR r.hold_id IS NULL OR r.hold_state <> 'open'  -- RESERVATION_NOT_FOUND or _SETTLED
       OR r.hold_tokens > r.held_tokens OR r.hold_cost_nanos > r.held_cost_nanos
       OR r.hold_tool_calls > r.held_tool_calls OR r.hold_retries > r.held_retries THEN
        outcome := 'slow';
        RETURN;
    END IF;
    WITH run AS (
        UPDATE budget.runs SET
            held_tokens = held_tokens - r.hold_tokens,
            held_cost_nanos = held_cost_nanos - r.hold_cost_nanos,
            held_tool_calls = held_tool_calls - r.hold_tool_calls,
            held_retries = held_retries - r.hold_retries,
            updated_at = now()
        WHERE tenant_id = p_tenant AND run_id = p_run_id
    ), hold_end AS (
        UPDATE budget.holds AS e SET state = 'released', ended_at = now()
        WHERE tenant_id = p_tenant AND run_id = p_run_id
          AND reservation_id = p_reservation_id AND state = 'open'
        RETURNING e
    ), ledger AS (
        INSERT INTO budget.ledger (
            tenant_id, run_id, request_id, decision, reservation_id, model, policy_version,
            held_tokens, held_cost_nanos, held_tool_calls, held_retries)
        VALUES (
            p_tenant, p_run_id, p_request_id, 'release', p_reservation_id, r.hold_model,
            r.policy_version, -r.hold_tokens, -r.hold_cost_nanos, -r.hold_tool_calls,
            -r.hold_retries)
    ), reply AS (
        SELECT convert_to(json_build_object('hold', budget.hold_reply(hold_end.e))::text,
                          'UTF8') AS data
        FROM hold_end
    ), logged AS (
        INSERT INTO budget.request_log (tenant_id, request_id, fingerprint, response)
        SELECT p_tenant, p_request_id, p_fingerprint, reply.data FROM reply
    )
    SELECT reply.data INTO response FROM reply;
    IF response IS NULL THEN  -- the hold ended while this call waited for the run
        RAISE EXCEPTION 'hold % ended concurrently', p_reservation_id
            USING ERRCODE = 'serialization_failure';
    END IF;
    outcome := 'done';
END;
$$;
