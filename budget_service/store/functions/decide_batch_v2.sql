-- budget.decide_batch_v2: The engine: decides every Reserve, Consume, Release and Check of one
-- tenant's batch. Called by budget.decide_v2 (and the previous release's budget.decide_v1);
-- its argument is not named p_tenant, so on Citus it is created on every node and runs where
-- the delegated caller runs (servicekit/citus.py delegates by p_tenant).
--
-- The ledger decides (DESIGN 3.3): every rule of Reserve, Consume, Release and Check lives
-- here, once, in the engine. It takes a batch (budget.decide_item_v2[], in arrival order)
-- of one tenant, and is one statement, so one transaction: the per-process
-- group-commit batcher (servicekit/batching.py) sends the mutations in flight together and
-- answers each caller after COMMIT. One item is a batch of one.
--
-- A batch, in order:
--   1. enters the tenant (row-level security, migration 0005) from its argument;
--   2. locks the runs of the batch in run_id order (COLLATE "C"), then looks up the request
--      log: a stored request id replays its reply (same fingerprint) or is REQUEST_ID_REUSED
--      (read after the lock, so a twin on the same run that committed meanwhile replays);
--      later in the batch, a request id stored by an earlier item replays or is reused the
--      same way (an earlier item that was refused stored nothing, so its twin is decided
--      again);
--   3. then creates the
--      current window rows of their pools and locks every pool row it may change in the
--      canonical order (scope workflow < agent < project, scope_id, window_start), the order
--      every writer uses, so batches of two replicas and the sweeper cannot deadlock;
--   4. expires every locked run's open holds past expires_at (ledger 'expire' rows carry the
--      request id of the batch's first item on that run); other runs' overdue holds on a
--      locked pool stop counting on it but are left for their own runs or the sweeper;
--   5. decides each item in order against the state the items before it left:
--      Reserve: run state, then model policy, then breach (consumed + estimate > limit), then
--      contention (consumed + held + estimate > limit), over the run and the current window of
--      every pool, run first; UP_TO grants tokens and cost up to what is left; a breach in
--      hard mode emits budget.exhausted (once), cap.breached, and fails or interrupts the run;
--      advisory mode (host or scope) grants the full estimate and reports what would have
--      refused it. Consume is never refused for being over budget; it settles the named open
--      hold (a released or expired one no longer counts: the usage is recorded without it).
--      Release voids an open hold. Hard refusals of Reserve leave a ledger 'refusal' row (and
--      a breach's events); RESERVATION_NOT_FOUND, RESERVATION_SETTLED and totals past the
--      bigint range (VALIDATION_FAILED) write nothing;
--   6. writes each touched run and pool row once, inserts holds, ledger rows (in decision
--      order), events (per run, consecutive seq) and the request log rows of the done items,
--      and notifies WatchRunEvents listeners of watched runs.
-- With p_read_only (Check) the same code runs without locks and writes nothing: overdue holds
-- simply do not count, and a 'check' item is judged exactly as a Reserve would be.
--
-- Each item's answer: outcomes[i] one of done, replay, reused, not_found, refused, invalid,
-- checked; responses[i] the reply document (store/stored_replies.py) for done and replay, or
-- the Check verdict; refusals[i] the reason and its facts; tallies[i] what metrics count.
-- A twin request id committed meanwhile by another replica makes the request-log insert fail
-- with unique_violation: the caller runs the batch again, which replays it.
--
-- Versioned by name: an incompatible rule change is budget.decide_v3 beside decide_v2, and a
-- migration drops the old one only once no replica calls it. Dimension order everywhere:
-- tokens, cost, toolCalls, retries.
--
-- Lookups never read the tenant: the runs, the stored replies, the holds and the pool rows
-- are found by one primary-key probe per key of the batch (unnest of the keys joined
-- LATERAL, kept a nested loop), whatever the statistics or the plan cache mode
-- (tests/integration/test_budget_plans.py).

--
-- Model calls per window (issue 14 item 6; DESIGN 3.2): a pooled budget may bound how many
-- model calls its runs make per window, e.g. at most 600 requests a minute on a project.
--
-- Model calls derive from the items' models (no field of their own):
--   - a Reserve (or Check) naming a model is one model call: it holds 1 on every pool it draws
--     on (model_match respected), judged with the other dimensions in the same all-or-nothing
--     check: breach when consumed + 1 > max_model_calls (BUDGET_EXHAUSTED naming the pool,
--     dimension "modelCalls", RetryInfo to the window's end; the run lives, as for every pool
--     refusal), contention when consumed + held + 1 > max_model_calls (BUDGET_HELD). UP_TO
--     never shrinks it. A Reserve without a model (a tool call, a retry) is no model call;
--   - Consume records the call: consumed + 1 when it names a model or settles a hold that held
--     one, and the settled hold's held call goes; Release and expiry drop the held call;
--   - a run never bounds model calls: its columns, events and statuses keep RFC 0084's four
--     dimensions. A pool's own events (tenant stream) name this one "modelCalls", once per
--     pool, window and dimension like the others.
-- Every pool a hold draws on holds its model call
-- (bounded or not, like the other dimensions), so the ledger's per-row amounts stay uniform.
-- Dimension order everywhere in the engine: tokens, cost, toolCalls, retries, then modelCalls
-- (index 5, pools only). The ledger records the model calls each row moves on its pools, so
-- its deltas still sum to every pool's consumed and held.
CREATE OR REPLACE FUNCTION budget.decide_batch_v2(
    batch_tenant text, p_host_advisory boolean, p_read_only boolean,
    p_items budget.decide_item_v2[],
    OUT outcomes text[], OUT responses bytea[], OUT refusals jsonb[], OUT tallies jsonb[])
LANGUAGE plpgsql
AS $$
DECLARE
    p_tenant constant text := batch_tenant;
    -- The batch's columns, in item order.
    p_kinds text[]; p_request_ids text[]; p_fingerprints bytea[]; p_run_ids text[];
    p_reservation_ids text[]; p_models text[]; p_tokens bigint[]; p_cost bigint[];
    p_tool_calls bigint[]; p_retries bigint[]; p_up_to boolean[]; p_ttl_seconds integer[];
    names constant text[] := ARRAY['tokens', 'cost', 'toolCalls', 'retries', 'modelCalls'];
    fields constant text[] := ARRAY['tokens', 'cost_nanos', 'tool_calls', 'retries',
                                     'model_calls'];
    breach_kinds constant text[] :=
        ARRAY['budget-tokens', 'budget-cost', 'budget-tool-calls', 'budget-retries'];
    max_total constant numeric := 9223372036854775807;
    n constant integer := coalesce(cardinality(p_items), 0);
    v_now constant timestamptz := now();
    i integer; j integer; k integer; m integer; h integer; d integer; b integer;
    rec record;
    amt bigint[];
    item_run integer[];
    wanted text[] := '{}';
    named_runs text[] := '{}';
    named_ids text[] := '{}';
    -- runs, by slot (lock order)
    nr integer := 0;
    r_id text[]; r_project text[]; r_workflow text[]; r_agent text[]; r_state text[];
    r_threshold integer[]; r_on_exh text[]; r_binding jsonb[]; r_lists jsonb[];
    r_advisory boolean[]; r_version integer[]; r_next_seq bigint[]; r_lim bigint[];
    r_used bigint[]; r_held bigint[]; r_crossed integer[]; r_exhausted integer[];
    r_breached integer[]; r_stop_dim text[]; r_stop_lim bigint[]; r_stop_used bigint[];
    r_stop_obs bigint[]; r_stop_scope text[]; r_stop_scope_id text[];
    r_touched boolean[]; r_first_req text[]; r_expired integer[]; r_adv_refusals integer[];
    r_pools text[];  -- the run's current pool slots, canonical order, as 'm,m,...'
    r_events integer[];
    -- pool rows, by slot
    np integer := 0;
    p_key text[] := '{}'; p_scope text[] := '{}'; p_scope_id text[] := '{}';
    p_window timestamptz[] := '{}'; p_lim bigint[] := '{}'; p_current boolean[] := '{}';
    p_used bigint[]; p_held bigint[]; p_other bigint[]; p_touched boolean[];
    p_found boolean[];
    p_window_kind text[] := '{}'; p_threshold integer[] := '{}'; p_match text[] := '{}';
    v_any_match boolean := false;
    v_deciding text[] := '{}';  -- the runs with a request decided here (their holds expire)
    p_crossed integer[]; p_exhausted integer[]; p_next_seq bigint[]; p_events integer[];
    npe integer := 0;
    pe_slot integer[] := '{}'; pe_seq bigint[] := '{}'; pe_type text[] := '{}';
    pe_payload text[] := '{}';
    v_retry double precision;
    b_slot integer;
    v_key text;
    -- holds of this batch: loaded (named or overdue) and new ones
    nh integer := 0;
    h_id text[] := '{}'; h_run integer[] := '{}'; h_model text[] := '{}';
    h_state text[] := '{}'; h_was_open boolean[] := '{}'; h_new boolean[] := '{}';
    h_req bigint[] := '{}'; h_gr bigint[] := '{}'; h_slots text[] := '{}';
    h_created timestamptz[] := '{}'; h_expires timestamptz[] := '{}';
    h_version integer[] := '{}';
    -- ledger rows, events, request log rows
    nl integer := 0;
    l_run text[] := '{}'; l_req text[] := '{}'; l_decision text[] := '{}';
    l_reason text[] := '{}'; l_res text[] := '{}'; l_model text[] := '{}';
    l_version integer[] := '{}'; l_c1 bigint[] := '{}'; l_c2 bigint[] := '{}';
    l_c3 bigint[] := '{}'; l_c4 bigint[] := '{}'; l_h1 bigint[] := '{}';
    l_h2 bigint[] := '{}'; l_h3 bigint[] := '{}'; l_h4 bigint[] := '{}';
    l_c5 bigint[] := '{}'; l_h5 bigint[] := '{}';  -- model calls: pools only
    l_pools jsonb[] := '{}'; l_detail jsonb[] := '{}';
    ne integer := 0;
    e_run text[] := '{}'; e_seq bigint[] := '{}'; e_type text[] := '{}';
    e_payload text[] := '{}';
    q_req text[] := '{}'; q_fp bytea[] := '{}'; q_resp bytea[] := '{}';
    -- one item's decision
    v_kind text; v_adv boolean; v_slots integer[]; v_denied text; v_reason text;
    v_adv_reason text; v_invalid text; v_facts jsonb; v_tally jsonb;
    a bigint; lim bigint; used bigint; held bigint; need bigint;
    bd integer; b_lim bigint; b_used bigint; b_obs bigint; b_scope text; b_scope_id text;
    cd integer; c_lim bigint; c_used bigint; c_held bigint; c_req bigint; c_scope text;
    c_scope_id text;
    g bigint[]; overrun bigint[];
    v_settles boolean; v_hold_state text; v_first_breach integer;
    v_crossed text[]; v_exhausted text[]; v_breached text[];
    v_pool_crossed text[]; v_pool_exhausted text[];
    v_events_before integer; v_status text; v_hold_doc json; v_pools_doc jsonb;
    v_pools_json text; v_message text; v_scope text; v_reply text; v_done boolean;
    v_ledger_pools jsonb;
    v_any_pools boolean;
    v_any_overdue boolean;
    v_ended integer := 0;
    -- writes
    w_count integer;
    w_id text; w_state text; w_scope text; w_scope_id text; w_window timestamptz;
    w_u1 bigint; w_u2 bigint; w_u3 bigint; w_u4 bigint;
    w_h1 bigint; w_h2 bigint; w_h3 bigint; w_h4 bigint; w_u5 bigint; w_h5 bigint;
    w_crossed text[]; w_exhausted text[]; w_breached text[];
    w_sd text; w_sl bigint; w_su bigint; w_so bigint; w_ss text; w_ssi text;
    w_events integer; w_adv integer;
    w_run text; w_model text; w_version integer; w_created timestamptz; w_expires timestamptz;
    w_pscopes text[]; w_pids text[]; w_pwindows timestamptz[];
BEGIN
    PERFORM set_config('ration.tenant_id', p_tenant, true);
    outcomes := array_fill(NULL::text, ARRAY[n]);
    responses := array_fill(NULL::bytea, ARRAY[n]);
    refusals := array_fill(NULL::jsonb, ARRAY[n]);
    tallies := array_fill(NULL::jsonb, ARRAY[n]);
    IF n = 0 THEN
        RETURN;
    END IF;
    SELECT array_agg(x.kind ORDER BY x.o), array_agg(x.request_id ORDER BY x.o),
           array_agg(x.fingerprint ORDER BY x.o), array_agg(x.run_id ORDER BY x.o),
           array_agg(x.reservation_id ORDER BY x.o), array_agg(x.model ORDER BY x.o),
           array_agg(x.tokens ORDER BY x.o), array_agg(x.cost_nanos ORDER BY x.o),
           array_agg(x.tool_calls ORDER BY x.o), array_agg(x.retries ORDER BY x.o),
           array_agg(x.up_to ORDER BY x.o), array_agg(x.ttl_seconds ORDER BY x.o)
    INTO p_kinds, p_request_ids, p_fingerprints, p_run_ids, p_reservation_ids, p_models,
         p_tokens, p_cost, p_tool_calls, p_retries, p_up_to, p_ttl_seconds
    FROM unnest(p_items) WITH ORDINALITY AS x(kind, request_id, fingerprint, run_id,
        reservation_id, model, tokens, cost_nanos, tool_calls, retries, up_to, ttl_seconds, o);
    item_run := array_fill(NULL::integer, ARRAY[n]);
    amt := array_fill(0::bigint, ARRAY[n, 5]);
    FOR i IN 1..n LOOP
        amt[i][1] := coalesce(p_tokens[i], 0);
        amt[i][2] := coalesce(p_cost[i], 0);
        amt[i][3] := coalesce(p_tool_calls[i], 0);
        amt[i][4] := coalesce(p_retries[i], 0);
        -- A Reserve, Check or Consume naming a model is one model call (pools only).
        amt[i][5] := CASE WHEN p_kinds[i] IN ('reserve', 'check', 'consume')
                           AND coalesce(p_models[i], '') <> '' THEN 1 ELSE 0 END;
    END LOOP;

    FOR i IN 1..n LOOP
        IF NOT p_run_ids[i] = ANY(wanted) THEN
            wanted := wanted || p_run_ids[i];
        END IF;
        IF p_kinds[i] IN ('consume', 'release')
           AND p_reservation_ids[i] <> '' THEN
            named_runs := named_runs || p_run_ids[i];
            named_ids := named_ids || p_reservation_ids[i];
        END IF;
    END LOOP;

    -- 2. The runs, locked in run_id order (read only: as they are).
    IF p_read_only THEN
        SELECT array_agg(s.run_id),
               array_agg(s.project_id),
               array_agg(s.workflow_id),
               array_agg(s.agent_id),
               array_agg(s.state),
               array_agg(s.threshold_percent),
               array_agg(s.on_exhaustion),
               array_agg(s.binding),
               array_agg(s.model_lists),
               array_agg(s.scope_advisory),
               array_agg(s.policy_version),
               array_agg(s.next_seq),
               array_agg(ARRAY[s.max_tokens, s.max_cost_nanos, s.max_tool_calls,
                               s.max_retries]),
               array_agg(ARRAY[s.consumed_tokens, s.consumed_cost_nanos,
                               s.consumed_tool_calls, s.consumed_retries]
                        ),
               array_agg(ARRAY[s.held_tokens, s.held_cost_nanos, s.held_tool_calls,
                               s.held_retries]),
               array_agg(budget.flag_mask_v1(s.crossed)),
               array_agg(budget.flag_mask_v1(s.exhausted)),
               array_agg(budget.flag_mask_v1(s.breached)),
               array_agg(s.stopped_dimension),
               array_agg(s.stopped_limit),
               array_agg(s.stopped_consumed),
               array_agg(s.stopped_observed),
               array_agg(s.stopped_scope),
               array_agg(s.stopped_scope_id),
               coalesce(bool_or(cardinality(s.pool_scopes) > 0), false),
               coalesce(bool_or(EXISTS (
                   SELECT 1 FROM budget.holds o
                   WHERE o.tenant_id = p_tenant AND o.run_id = s.run_id AND o.state = 'open'
                     AND o.expires_at <= v_now)), false)
        INTO r_id, r_project, r_workflow, r_agent, r_state, r_threshold, r_on_exh, r_binding,
             r_lists, r_advisory, r_version, r_next_seq, r_lim, r_used, r_held, r_crossed,
             r_exhausted, r_breached, r_stop_dim, r_stop_lim, r_stop_used, r_stop_obs,
             r_stop_scope, r_stop_scope_id, v_any_pools, v_any_overdue
        -- One primary-key probe per run of the batch (LIMIT keeps the probe a nested loop:
        -- never a scan of the tenant's runs filtered by the batch's keys).
        FROM unnest(wanted) AS w(run_id)
        CROSS JOIN LATERAL (
            SELECT u.* FROM budget.runs u
            WHERE u.tenant_id = p_tenant AND u.run_id = w.run_id LIMIT 1) s;
    ELSE
        SELECT array_agg(s.run_id),
               array_agg(s.project_id),
               array_agg(s.workflow_id),
               array_agg(s.agent_id),
               array_agg(s.state),
               array_agg(s.threshold_percent),
               array_agg(s.on_exhaustion),
               array_agg(s.binding),
               array_agg(s.model_lists),
               array_agg(s.scope_advisory),
               array_agg(s.policy_version),
               array_agg(s.next_seq),
               array_agg(ARRAY[s.max_tokens, s.max_cost_nanos, s.max_tool_calls,
                               s.max_retries]),
               array_agg(ARRAY[s.consumed_tokens, s.consumed_cost_nanos,
                               s.consumed_tool_calls, s.consumed_retries]
                        ),
               array_agg(ARRAY[s.held_tokens, s.held_cost_nanos, s.held_tool_calls,
                               s.held_retries]),
               array_agg(budget.flag_mask_v1(s.crossed)),
               array_agg(budget.flag_mask_v1(s.exhausted)),
               array_agg(budget.flag_mask_v1(s.breached)),
               array_agg(s.stopped_dimension),
               array_agg(s.stopped_limit),
               array_agg(s.stopped_consumed),
               array_agg(s.stopped_observed),
               array_agg(s.stopped_scope),
               array_agg(s.stopped_scope_id),
               coalesce(bool_or(cardinality(s.pool_scopes) > 0), false),
               coalesce(bool_or(EXISTS (
                   SELECT 1 FROM budget.holds o
                   WHERE o.tenant_id = p_tenant AND o.run_id = s.run_id AND o.state = 'open'
                     AND o.expires_at <= v_now)), false)
        INTO r_id, r_project, r_workflow, r_agent, r_state, r_threshold, r_on_exh, r_binding,
             r_lists, r_advisory, r_version, r_next_seq, r_lim, r_used, r_held, r_crossed,
             r_exhausted, r_breached, r_stop_dim, r_stop_lim, r_stop_used, r_stop_obs,
             r_stop_scope, r_stop_scope_id, v_any_pools, v_any_overdue
        -- Locked in run_id order by one primary-key probe per key of the batch: the keys are
        -- sorted first and each probe locks its row, so the lock order is the sort order.
        FROM (SELECT w.run_id FROM unnest(wanted) AS w(run_id)
              ORDER BY w.run_id COLLATE "C") w
        CROSS JOIN LATERAL (
            SELECT u.* FROM budget.runs u
            WHERE u.tenant_id = p_tenant AND u.run_id = w.run_id
            FOR UPDATE) s;
    END IF;
    --    Stored replies, read once the runs are locked: a twin on the same run that committed
    -- while this batch waited for the lock is replayed, not applied again.
    IF NOT p_read_only THEN
        FOR rec IN
            SELECT l.request_id, l.fingerprint, l.response
            FROM unnest(p_request_ids) AS q(request_id)
            CROSS JOIN LATERAL (
                SELECT g.request_id, g.fingerprint, g.response FROM budget.request_log g
                WHERE g.tenant_id = p_tenant AND g.request_id = q.request_id LIMIT 1) l
        LOOP
            FOR i IN 1..n LOOP
                CONTINUE WHEN p_request_ids[i] <> rec.request_id;
                IF rec.fingerprint = p_fingerprints[i] THEN
                    outcomes[i] := 'replay';
                    responses[i] := rec.response;
                ELSE
                    outcomes[i] := 'reused';
                END IF;
            END LOOP;
        END LOOP;
    END IF;
    nr := coalesce(cardinality(r_id), 0);
    IF nr > 0 THEN
        r_touched := array_fill(false, ARRAY[nr]);
        r_first_req := array_fill(NULL::text, ARRAY[nr]);
        r_expired := array_fill(0, ARRAY[nr]);
        r_adv_refusals := array_fill(0, ARRAY[nr]);
        r_pools := array_fill(''::text, ARRAY[nr]);
        r_events := array_fill(0, ARRAY[nr]);
        FOR i IN 1..n LOOP
            CONTINUE WHEN outcomes[i] IS NOT NULL;
            item_run[i] := array_position(r_id, p_run_ids[i]);
            IF item_run[i] IS NOT NULL AND r_first_req[item_run[i]] IS NULL THEN
                r_first_req[item_run[i]] := p_request_ids[i];
                v_deciding := v_deciding || p_run_ids[i];
            END IF;
        END LOOP;

        IF v_any_pools THEN
        -- The current window of every pooled budget the runs with a request decided here
        -- draw on, in canonical order. A run with only replays gets no new window row (rule
        -- 1: a replay writes nothing), e.g. a twin retried after midnight.
            FOR rec IN
                SELECT s.scope, s.scope_id, s.window_kind,
                       coalesce(s.threshold_percent, 80) AS threshold, s.model_match,
                       ARRAY[s.max_tokens, s.max_cost_nanos, s.max_tool_calls, s.max_retries,
                             s.max_model_calls] AS lims,
                       array_agg(u.run_id) AS runs
                FROM unnest(v_deciding) AS w(run_id)
                CROSS JOIN LATERAL (
                    SELECT v.run_id, v.pool_scopes, v.pool_scope_ids FROM budget.runs v
                    WHERE v.tenant_id = p_tenant AND v.run_id = w.run_id
                      AND cardinality(v.pool_scopes) > 0 LIMIT 1) u
                CROSS JOIN LATERAL unnest(u.pool_scopes, u.pool_scope_ids) AS q(scope, scope_id)
                CROSS JOIN LATERAL (
                    SELECT * FROM budget.scope_budgets b
                    WHERE b.tenant_id = p_tenant AND b.scope = q.scope
                      AND b.scope_id = q.scope_id AND b.kind = 'pooled' LIMIT 1) s
                GROUP BY s.scope, s.scope_id, s.window_kind, s.threshold_percent, s.model_match,
                         s.max_tokens, s.max_cost_nanos,
                         s.max_tool_calls, s.max_retries, s.max_model_calls
                ORDER BY budget.scope_rank_v1(s.scope), s.scope_id COLLATE "C"
            LOOP
                np := np + 1;
                p_scope := p_scope || rec.scope;
                p_scope_id := p_scope_id || rec.scope_id;
                p_window := p_window || budget.window_start_v1(rec.window_kind, v_now);
                p_key := p_key || (rec.scope || chr(31) || rec.scope_id || chr(31)
                                   || budget.epoch_us(p_window[np]));
                p_lim := p_lim || ARRAY[rec.lims];
                p_current := p_current || true;
                p_window_kind := p_window_kind || rec.window_kind;
                p_threshold := p_threshold || rec.threshold::integer;
                p_match := p_match || rec.model_match;
                v_any_match := v_any_match OR rec.model_match IS NOT NULL;
                FOREACH v_key IN ARRAY rec.runs LOOP
                    k := array_position(r_id, v_key);
                    r_pools[k] := r_pools[k] || CASE WHEN r_pools[k] = '' THEN '' ELSE ',' END || np;
                END LOOP;
            END LOOP;
        END IF;

        IF v_any_overdue OR cardinality(named_ids) > 0 THEN
            -- Holds this batch may end: every open one past its expiry, and each named one.
            FOR rec IN
                SELECT o.reservation_id, o.run_id, o.model, o.state, o.policy_version,
                       ARRAY[o.requested_tokens, o.requested_cost_nanos, o.requested_tool_calls,
                             o.requested_retries] AS req,
                       ARRAY[o.granted_tokens, o.granted_cost_nanos, o.granted_tool_calls,
                             o.granted_retries, o.granted_model_calls] AS gr,
                       o.pool_scopes, o.pool_scope_ids, o.pool_windows, o.created_at, o.expires_at
                FROM (
                    -- Each part walks an index: the open holds by run and expiry, and the named
                    -- holds by primary key (an OR of the two would scan every hold of the runs).
                    SELECT h.* FROM unnest(r_id) AS w(run_id)
                    CROSS JOIN LATERAL (
                        SELECT * FROM budget.holds k
                        WHERE k.tenant_id = p_tenant AND k.run_id = w.run_id
                          AND k.state = 'open' AND k.expires_at <= v_now OFFSET 0) h
                    UNION ALL
                    SELECT h.*
                    FROM unnest(named_runs, named_ids) AS x(run_id, reservation_id)
                    CROSS JOIN LATERAL (
                        SELECT * FROM budget.holds k
                        WHERE k.tenant_id = p_tenant AND k.run_id = x.run_id
                          AND k.reservation_id = x.reservation_id LIMIT 1) h
                ) o
                ORDER BY o.run_id COLLATE "C", o.created_at, o.reservation_id COLLATE "C"
            LOOP
                -- A named hold may also be overdue: loaded once.
                CONTINUE WHEN EXISTS (
                    SELECT 1 FROM unnest(h_id, h_run) AS y(id, run)
                    WHERE y.id = rec.reservation_id AND y.run = array_position(r_id, rec.run_id));
                nh := nh + 1;
                h_id := h_id || rec.reservation_id;
                h_run := h_run || array_position(r_id, rec.run_id);
                h_model := h_model || rec.model;
                h_state := h_state || rec.state;
                h_was_open := h_was_open || (rec.state = 'open');
                h_new := h_new || false;
                h_req := h_req || ARRAY[rec.req];
                h_gr := h_gr || ARRAY[rec.gr];
                h_created := h_created || rec.created_at;
                h_expires := h_expires || rec.expires_at;
                h_version := h_version || rec.policy_version;
                v_key := '';
                -- Only an open hold can still change its pool rows.
                FOR j IN 1..CASE WHEN rec.state = 'open' THEN cardinality(rec.pool_scopes)
                                 ELSE 0 END LOOP
                    m := array_position(p_key, rec.pool_scopes[j] || chr(31)
                        || rec.pool_scope_ids[j] || chr(31) || budget.epoch_us(rec.pool_windows[j]));
                    IF m IS NULL THEN
                        np := np + 1;
                        m := np;
                        p_scope := p_scope || rec.pool_scopes[j];
                        p_scope_id := p_scope_id || rec.pool_scope_ids[j];
                        p_window := p_window || rec.pool_windows[j];
                        p_key := p_key || (rec.pool_scopes[j] || chr(31) || rec.pool_scope_ids[j]
                                           || chr(31) || budget.epoch_us(rec.pool_windows[j]));
                        p_lim := p_lim || ARRAY[ARRAY[NULL, NULL, NULL, NULL, NULL]::bigint[]];
                        p_current := p_current || false;
                        p_window_kind := p_window_kind || NULL::text;
                        p_threshold := p_threshold || 80;
                        p_match := p_match || NULL::text;
                    END IF;
                    v_key := v_key || CASE WHEN v_key = '' THEN '' ELSE ',' END || m;
                END LOOP;
                h_slots := h_slots || v_key;
            END LOOP;
        END IF;

        -- Pool rows: create the current windows, then lock every row in canonical order.
        IF np > 0 THEN
            p_used := array_fill(0::bigint, ARRAY[np, 5]);
            p_held := array_fill(0::bigint, ARRAY[np, 5]);
            p_other := array_fill(0::bigint, ARRAY[np, 5]);
            p_touched := array_fill(false, ARRAY[np]);
            p_found := array_fill(false, ARRAY[np]);
            p_crossed := array_fill(0, ARRAY[np]);
            p_exhausted := array_fill(0, ARRAY[np]);
            p_next_seq := array_fill(1::bigint, ARRAY[np]);
            p_events := array_fill(0, ARRAY[np]);
            IF NOT p_read_only THEN
                INSERT INTO budget.pool_balances (tenant_id, scope, scope_id, window_start)
                SELECT p_tenant, k.scope, k.scope_id, k.window_start
                FROM unnest(p_scope, p_scope_id, p_window, p_current)
                     AS k(scope, scope_id, window_start, cur)
                WHERE k.cur AND (
                    SELECT true FROM budget.pool_balances x
                    WHERE x.tenant_id = p_tenant AND x.scope = k.scope
                      AND x.scope_id = k.scope_id AND x.window_start = k.window_start
                    LIMIT 1) IS NULL
                ORDER BY budget.scope_rank_v1(k.scope), k.scope_id COLLATE "C", k.window_start
                ON CONFLICT DO NOTHING;
                FOR rec IN
                    SELECT x.scope, x.scope_id, x.window_start,
                           ARRAY[x.consumed_tokens, x.consumed_cost_nanos,
                                 x.consumed_tool_calls, x.consumed_retries,
                                 x.consumed_model_calls] AS used,
                           ARRAY[x.held_tokens, x.held_cost_nanos, x.held_tool_calls,
                                 x.held_retries, x.held_model_calls] AS held,
                           budget.flag_mask_v1(x.crossed) AS crossed,
                           budget.flag_mask_v1(x.exhausted) AS exhausted, x.next_seq
                    -- One probe per row, locked in canonical order (the keys sorted first).
                    FROM (SELECT * FROM unnest(p_scope, p_scope_id, p_window)
                              AS k(scope, scope_id, window_start)
                          ORDER BY budget.scope_rank_v1(k.scope), k.scope_id COLLATE "C",
                                   k.window_start) k
                    CROSS JOIN LATERAL (
                        SELECT * FROM budget.pool_balances y
                        WHERE y.tenant_id = p_tenant AND y.scope = k.scope
                          AND y.scope_id = k.scope_id AND y.window_start = k.window_start
                        FOR UPDATE) x
                LOOP
                    m := array_position(p_key, rec.scope || chr(31) || rec.scope_id || chr(31)
                                               || budget.epoch_us(rec.window_start));
                    p_found[m] := true;
                    p_crossed[m] := rec.crossed;
                    p_exhausted[m] := rec.exhausted;
                    p_next_seq[m] := rec.next_seq;
                    FOR d IN 1..5 LOOP
                        p_used[m][d] := rec.used[d];
                        p_held[m][d] := rec.held[d];
                    END LOOP;
                END LOOP;
            ELSE
                FOR rec IN
                    SELECT x.scope, x.scope_id, x.window_start,
                           ARRAY[x.consumed_tokens, x.consumed_cost_nanos,
                                 x.consumed_tool_calls, x.consumed_retries,
                                 x.consumed_model_calls] AS used,
                           ARRAY[x.held_tokens, x.held_cost_nanos, x.held_tool_calls,
                                 x.held_retries, x.held_model_calls] AS held,
                           budget.flag_mask_v1(x.crossed) AS crossed,
                           budget.flag_mask_v1(x.exhausted) AS exhausted, x.next_seq
                    FROM unnest(p_scope, p_scope_id, p_window) AS k(scope, scope_id, window_start)
                    CROSS JOIN LATERAL (
                        SELECT * FROM budget.pool_balances y
                        WHERE y.tenant_id = p_tenant AND y.scope = k.scope
                          AND y.scope_id = k.scope_id AND y.window_start = k.window_start
                        LIMIT 1) x
                LOOP
                    m := array_position(p_key, rec.scope || chr(31) || rec.scope_id || chr(31)
                                               || budget.epoch_us(rec.window_start));
                    p_found[m] := true;
                    p_crossed[m] := rec.crossed;
                    p_exhausted[m] := rec.exhausted;
                    p_next_seq[m] := rec.next_seq;
                    FOR d IN 1..5 LOOP
                        p_used[m][d] := rec.used[d];
                        p_held[m][d] := rec.held[d];
                    END LOOP;
                END LOOP;
            END IF;
            -- Other runs' holds past expiry still sit in a pool's held: they do not count.
            FOR rec IN
                SELECT k.scope, k.scope_id, k.window_start,
                       ARRAY[sum(o.granted_tokens), sum(o.granted_cost_nanos),
                             sum(o.granted_tool_calls), sum(o.granted_retries),
                             sum(o.granted_model_calls)]::bigint[] AS s
                FROM budget.holds o
                CROSS JOIN LATERAL unnest(o.pool_scopes, o.pool_scope_ids, o.pool_windows)
                     AS k(scope, scope_id, window_start)
                WHERE o.tenant_id = p_tenant AND o.state = 'open' AND o.expires_at <= v_now
                  AND NOT o.run_id = ANY(v_deciding)  -- those expire their own below
                  AND (k.scope, k.scope_id, k.window_start) IN (
                      SELECT * FROM unnest(p_scope, p_scope_id, p_window))
                GROUP BY 1, 2, 3
            LOOP
                m := array_position(p_key, rec.scope || chr(31) || rec.scope_id || chr(31)
                                           || budget.epoch_us(rec.window_start));
                FOR d IN 1..5 LOOP
                    p_other[m][d] := rec.s[d];
                END LOOP;
            END LOOP;
        END IF;

        -- 4. Expiry: the locked runs' overdue holds end first.
        FOR h IN 1..nh LOOP
            CONTINUE WHEN h_state[h] <> 'open' OR h_expires[h] > v_now;
            k := h_run[h];
            -- A run with no request decided here (only replays) is left as it is.
            CONTINUE WHEN r_first_req[k] IS NULL;
            h_state[h] := 'expired';
            v_ended := v_ended + 1;
            r_expired[k] := r_expired[k] + 1;
            r_touched[k] := true;
            v_slots := string_to_array(nullif(h_slots[h], ''), ',')::integer[];
            FOR d IN 1..4 LOOP
                IF h_gr[h][d] > r_held[k][d] THEN
                    RAISE EXCEPTION 'hold % settles more than its run holds', h_id[h];
                END IF;
                r_held[k][d] := r_held[k][d] - h_gr[h][d];
            END LOOP;
            v_ledger_pools := '[]';
            FOREACH m IN ARRAY coalesce(v_slots, '{}') LOOP
                v_ledger_pools := v_ledger_pools || jsonb_build_object('scope', p_scope[m],
                    'scope_id', p_scope_id[m], 'window_start', budget.iso_utc_v1(p_window[m]));
                CONTINUE WHEN NOT p_found[m];
                p_touched[m] := true;
                FOR d IN 1..5 LOOP
                    p_held[m][d] := p_held[m][d] - h_gr[h][d];
                END LOOP;
            END LOOP;
            nl := nl + 1;
            l_run := l_run || r_id[k]; l_req := l_req || r_first_req[k];
            l_decision := l_decision || 'expire'::text; l_reason := l_reason || NULL::text;
            l_res := l_res || h_id[h]; l_model := l_model || h_model[h];
            l_version := l_version || r_version[k];
            l_c1 := l_c1 || 0::bigint; l_c2 := l_c2 || 0::bigint;
            l_c3 := l_c3 || 0::bigint; l_c4 := l_c4 || 0::bigint;
            l_h1 := l_h1 || -h_gr[h][1]; l_h2 := l_h2 || -h_gr[h][2];
            l_h3 := l_h3 || -h_gr[h][3]; l_h4 := l_h4 || -h_gr[h][4];
            l_c5 := l_c5 || 0::bigint; l_h5 := l_h5 || -h_gr[h][5];
            l_pools := l_pools || v_ledger_pools; l_detail := l_detail || NULL::jsonb;
        END LOOP;
    END IF;

    -- 5. Each item in arrival order.
    FOR i IN 1..n LOOP
        CONTINUE WHEN outcomes[i] IS NOT NULL;
        v_kind := p_kinds[i];
        IF v_kind <> 'check' THEN
            j := array_position(q_req, p_request_ids[i]);  -- stored earlier in this batch
            IF j IS NOT NULL THEN
                IF q_fp[j] = p_fingerprints[i] THEN
                    outcomes[i] := 'replay';
                    responses[i] := q_resp[j];
                ELSE
                    outcomes[i] := 'reused';
                END IF;
                CONTINUE;
            END IF;
        END IF;
        k := item_run[i];
        IF k IS NULL THEN
            outcomes[i] := 'not_found';
            refusals[i] := jsonb_build_object('reason', 'RUN_NOT_FOUND');
            CONTINUE;
        END IF;
        v_adv := p_host_advisory OR r_advisory[k];
        v_slots := coalesce(string_to_array(nullif(r_pools[k], ''), ',')::integer[], '{}');
        IF v_any_match THEN  -- per-model pools apply only to the calls their glob matches
            v_slots := ARRAY(
                SELECT u.m FROM unnest(v_slots) WITH ORDINALITY AS u(m, o)
                WHERE p_match[u.m] IS NULL
                   OR (p_models[i] <> '' AND budget.glob_matches(p_match[u.m], p_models[i]))
                ORDER BY u.o);
        END IF;
        v_done := false;
        v_reason := NULL;
        v_facts := NULL;
        v_events_before := ne;
        v_hold_state := NULL;
        h := NULL;
        g := ARRAY[0, 0, 0, 0, 0]::bigint[];
        overrun := ARRAY[0, 0, 0, 0]::bigint[];
        v_tally := jsonb_build_object('decision', CASE v_kind WHEN 'check' THEN 'check'
                                                              ELSE v_kind END,
                                      'enforcement', CASE WHEN v_adv THEN 'advisory'
                                                          ELSE 'hard' END,
                                      'expired', CASE WHEN r_first_req[k] = p_request_ids[i]
                                                      THEN r_expired[k] ELSE 0 END);

        IF v_kind IN ('reserve', 'check') THEN
            -- The run's own state refuses first (enforced in advisory mode too).
            IF r_state[k] <> 'active' THEN
                v_reason := CASE r_state[k] WHEN 'failed' THEN 'BUDGET_EXHAUSTED'
                                            WHEN 'interrupted' THEN 'RUN_INTERRUPTED'
                                            ELSE 'RUN_CLOSED' END;
                v_facts := jsonb_build_object('reason', v_reason, 'state', r_state[k],
                                              'scope', 'run');
                IF r_state[k] = 'failed' AND r_stop_dim[k] IS NOT NULL THEN
                    v_facts := v_facts || jsonb_build_object(
                        'dimension', r_stop_dim[k], 'limit', r_stop_lim[k],
                        'consumed', r_stop_used[k], 'observed', r_stop_obs[k],
                        'breach_scope', r_stop_scope[k], 'breach_scope_id', r_stop_scope_id[k]);
                END IF;
            END IF;
            v_denied := NULL;
            IF p_models[i] <> '' AND r_lists[k] <> '[]'::jsonb THEN
                v_denied := budget.model_refused_by_v1(r_lists[k], p_models[i]);
            END IF;
            IF v_reason IS NULL AND v_denied IS NOT NULL AND (NOT v_adv OR v_kind = 'check')
            THEN
                v_reason := 'BUDGET_MODEL_DENIED';
                v_facts := jsonb_build_object('reason', v_reason, 'model', p_models[i],
                    'scope', v_denied,
                    'scope_id', CASE v_denied WHEN 'workflow' THEN r_workflow[k]
                                              WHEN 'agent' THEN r_agent[k]
                                              WHEN 'project' THEN r_project[k] ELSE '' END);
            END IF;
            bd := NULL;
            cd := NULL;
            v_invalid := NULL;
            IF v_reason IS NULL THEN
                -- Breach and contention over the run, then each pool (canonical order).
                <<balances>>
                FOR b IN 0..cardinality(v_slots) LOOP
                    m := CASE WHEN b = 0 THEN NULL ELSE v_slots[b] END;
                    FOR d IN 1..5 LOOP
                        a := amt[i][d];
                        -- Model calls are a pool's dimension only: a run never bounds them.
                        CONTINUE WHEN a <= 0 OR (b = 0 AND d = 5);
                        IF b = 0 THEN
                            lim := r_lim[k][d]; used := r_used[k][d]; held := r_held[k][d];
                        ELSE
                            lim := p_lim[m][d]; used := p_used[m][d];
                            held := p_held[m][d] - p_other[m][d];
                        END IF;
                        IF lim IS NULL THEN
                            IF held::numeric + a > max_total THEN
                                v_invalid := 'estimate.' || fields[d];
                                EXIT balances;
                            END IF;
                            CONTINUE;
                        END IF;
                        need := CASE WHEN p_up_to[i] AND d <= 2 THEN 1 ELSE a END;
                        IF used::numeric + need > lim THEN
                            IF bd IS NULL THEN
                                bd := d; b_lim := lim; b_used := used; b_obs := used + a;
                                b_slot := m;
                                b_scope := CASE WHEN b = 0 THEN 'run' ELSE p_scope[m] END;
                                b_scope_id := CASE WHEN b = 0 THEN '' ELSE p_scope_id[m] END;
                            END IF;
                        ELSIF used::numeric + held + need > lim THEN
                            IF cd IS NULL THEN
                                cd := d; c_lim := lim; c_used := used; c_held := held;
                                c_req := a;
                                c_scope := CASE WHEN b = 0 THEN 'run' ELSE p_scope[m] END;
                                c_scope_id := CASE WHEN b = 0 THEN '' ELSE p_scope_id[m] END;
                            END IF;
                        END IF;
                    END LOOP;
                END LOOP;
                IF bd IS NOT NULL THEN
                    cd := NULL;
                END IF;
            END IF;
            IF v_invalid IS NOT NULL THEN
                outcomes[i] := 'invalid';
                refusals[i] := jsonb_build_object('reason', 'VALIDATION_FAILED',
                                                  'field', v_invalid);
                CONTINUE;
            END IF;

            IF v_kind = 'check' THEN
                IF v_reason IS NULL THEN
                    v_reason := CASE WHEN bd IS NOT NULL THEN 'BUDGET_EXHAUSTED'
                                     WHEN cd IS NOT NULL THEN 'BUDGET_HELD' ELSE '' END;
                END IF;
                v_adv_reason := '';
                IF v_adv AND v_reason IN ('BUDGET_MODEL_DENIED', 'BUDGET_EXHAUSTED',
                                          'BUDGET_HELD') THEN
                    v_adv_reason := v_reason;
                    v_reason := '';
                END IF;
                v_tally := v_tally || jsonb_build_object(
                    'outcome', CASE WHEN v_reason <> '' THEN 'refused'
                                    WHEN v_adv_reason <> '' THEN 'advisory_refused'
                                    ELSE 'granted' END,
                    'reason', CASE WHEN v_reason <> '' THEN v_reason ELSE v_adv_reason END);
                v_done := true;
            ELSE
                IF v_reason IS NULL AND bd IS NOT NULL AND v_adv THEN
                    -- Advisory: events only, as consumption reaches them (RFC 0084 section E);
                    -- the would-be refusal is reported on the grant below.
                    NULL;
                ELSIF v_reason IS NULL AND bd IS NOT NULL AND b_scope <> 'run' THEN
                    -- A pool that cannot fit refuses; the run lives (its own budget is not
                    -- breached), and may retry when the pool's window renews.
                    v_reason := 'BUDGET_EXHAUSTED';
                    v_retry := extract(epoch FROM budget.window_end_v1(
                        p_window_kind[b_slot], p_window[b_slot]) - v_now);
                    v_facts := jsonb_build_object(
                        'reason', v_reason, 'state', r_state[k], 'scope', b_scope,
                        'scope_id', b_scope_id, 'dimension', names[bd], 'limit', b_lim,
                        'consumed', b_used, 'observed', b_obs, 'breach_scope', b_scope,
                        'breach_scope_id', b_scope_id, 'retry_after_seconds', v_retry);
                ELSIF v_reason IS NULL AND bd IS NOT NULL THEN
                    -- The run's own budget: exhausted (once), cap.breached, and the run stops.
                    IF (r_exhausted[k] >> (bd - 1)) & 1 = 0 THEN
                        ne := ne + 1;
                        e_run := e_run || r_id[k]; e_type := e_type || 'budget.exhausted'::text;
                        e_seq := e_seq || (r_next_seq[k] + r_events[k]);
                        r_events[k] := r_events[k] + 1;
                        e_payload := e_payload || format(
                            '{"dimension":"%s","consumed":%s,"limit":%s}', names[bd],
                            budget.amount_text(bd, b_used), budget.amount_text(bd, b_lim));
                    END IF;
                    ne := ne + 1;
                    e_run := e_run || r_id[k]; e_type := e_type || 'cap.breached'::text;
                    e_seq := e_seq || (r_next_seq[k] + r_events[k]);
                    r_events[k] := r_events[k] + 1;
                    e_payload := e_payload || format(
                        '{"kind":"%s","limit":%s,"observed":%s}', breach_kinds[bd],
                        budget.amount_text(bd, b_lim), budget.amount_text(bd, b_obs));
                    r_exhausted[k] := r_exhausted[k] | (1 << (bd - 1));
                    r_breached[k] := r_breached[k] | (1 << (bd - 1));
                    r_touched[k] := true;
                    IF true THEN
                        r_stop_dim[k] := names[bd]; r_stop_lim[k] := b_lim;
                        r_stop_used[k] := b_used; r_stop_obs[k] := b_obs;
                        r_stop_scope[k] := b_scope; r_stop_scope_id[k] := b_scope_id;
                        IF r_on_exh[k] = 'interrupt' THEN
                            r_state[k] := 'interrupted';
                            v_reason := 'RUN_INTERRUPTED';
                        ELSE
                            r_state[k] := 'failed';
                            v_reason := 'BUDGET_EXHAUSTED';
                            v_message := format('budget exhausted: %s limit %s, observed %s',
                                names[bd], budget.amount_text(bd, b_lim),
                                budget.amount_text(bd, b_obs));
                            ne := ne + 1;
                            e_run := e_run || r_id[k]; e_type := e_type || 'run.failed'::text;
                            e_seq := e_seq || (r_next_seq[k] + r_events[k]);
                            r_events[k] := r_events[k] + 1;
                            e_payload := e_payload || format(
                                '{"error":{"code":"budget_exhausted","message":%s}}',
                                to_json(v_message)::text);
                        END IF;
                        v_facts := jsonb_build_object(
                            'reason', v_reason, 'state', r_state[k], 'scope', b_scope,
                            'scope_id', b_scope_id, 'dimension', names[bd], 'limit', b_lim,
                            'consumed', b_used, 'observed', b_obs, 'breach_scope', b_scope,
                            'breach_scope_id', b_scope_id);
                    END IF;
                ELSIF v_reason IS NULL AND cd IS NOT NULL AND NOT v_adv THEN
                    v_reason := 'BUDGET_HELD';
                    v_facts := jsonb_build_object(
                        'reason', v_reason, 'scope', c_scope, 'scope_id', c_scope_id,
                        'dimension', names[cd],
                        'limit', c_lim, 'consumed', c_used, 'held', c_held,
                        'requested', c_req);
                END IF;

                IF v_reason IS NOT NULL THEN
                    -- A hard refusal: a ledger row (and a breach's events), no hold.
                    outcomes[i] := 'refused';
                    refusals[i] := v_facts;
                    nl := nl + 1;
                    l_run := l_run || r_id[k]; l_req := l_req || p_request_ids[i];
                    l_decision := l_decision || 'refusal'::text; l_reason := l_reason || v_reason;
                    l_res := l_res || NULL::text; l_model := l_model || p_models[i];
                    l_version := l_version || r_version[k];
                    l_c1 := l_c1 || 0::bigint; l_c2 := l_c2 || 0::bigint;
                    l_c3 := l_c3 || 0::bigint; l_c4 := l_c4 || 0::bigint;
                    l_h1 := l_h1 || 0::bigint; l_h2 := l_h2 || 0::bigint;
                    l_h3 := l_h3 || 0::bigint; l_h4 := l_h4 || 0::bigint;
                    l_c5 := l_c5 || 0::bigint; l_h5 := l_h5 || 0::bigint;
                    l_pools := l_pools || '[]'::jsonb;
                    l_detail := l_detail || jsonb_build_object('requested', jsonb_build_object(
                        'tokens', amt[i][1], 'cost', amt[i][2], 'toolCalls', amt[i][3],
                        'retries', amt[i][4]));
                    tallies[i] := v_tally || jsonb_build_object(
                        'outcome', 'refused', 'reason', v_reason,
                        'scope', coalesce(v_facts ->> 'scope', 'run'),
                        'events', to_jsonb(e_type[v_events_before + 1:ne]));
                    IF bd IS NOT NULL THEN
                        tallies[i] := tallies[i] || jsonb_build_object('breach_dim', names[bd]);
                    END IF;
                    CONTINUE;
                END IF;

                -- Granted: the full estimate in advisory mode, else all or nothing / UP_TO.
                v_adv_reason := CASE WHEN v_denied IS NOT NULL THEN 'BUDGET_MODEL_DENIED'
                                     WHEN bd IS NOT NULL THEN 'BUDGET_EXHAUSTED'
                                     WHEN cd IS NOT NULL THEN 'BUDGET_HELD' ELSE '' END;
                FOR d IN 1..5 LOOP
                    g[d] := greatest(amt[i][d], 0);
                END LOOP;
                IF NOT v_adv AND p_up_to[i] THEN
                    FOR d IN 1..2 LOOP
                        CONTINUE WHEN g[d] = 0;
                        IF r_lim[k][d] IS NOT NULL THEN
                            g[d] := least(g[d], greatest(0,
                                r_lim[k][d] - r_used[k][d] - r_held[k][d]));
                        END IF;
                        FOREACH m IN ARRAY v_slots LOOP
                            CONTINUE WHEN p_lim[m][d] IS NULL;
                            g[d] := least(g[d], greatest(0, p_lim[m][d] - p_used[m][d]
                                - (p_held[m][d] - p_other[m][d])));
                        END LOOP;
                    END LOOP;
                END IF;
                nh := nh + 1;
                h := nh;
                h_id := h_id || p_reservation_ids[i]; h_run := h_run || k;
                h_model := h_model || p_models[i]; h_state := h_state || 'open'::text;
                h_was_open := h_was_open || false; h_new := h_new || true;
                h_req := h_req || ARRAY[ARRAY[amt[i][1], amt[i][2], amt[i][3], amt[i][4]]];
                h_gr := h_gr || ARRAY[g];
                h_slots := h_slots || array_to_string(v_slots, ',');
                h_created := h_created || v_now;
                h_expires := h_expires || (v_now + make_interval(secs => p_ttl_seconds[i]));
                h_version := h_version || r_version[k];
                v_ledger_pools := '[]';
                FOR d IN 1..4 LOOP
                    r_held[k][d] := r_held[k][d] + g[d];
                END LOOP;
                FOREACH m IN ARRAY v_slots LOOP
                    v_ledger_pools := v_ledger_pools || jsonb_build_object('scope', p_scope[m],
                        'scope_id', p_scope_id[m],
                        'window_start', budget.iso_utc_v1(p_window[m]));
                    p_touched[m] := true;
                    FOR d IN 1..5 LOOP
                        p_held[m][d] := p_held[m][d] + g[d];
                    END LOOP;
                END LOOP;
                IF v_adv_reason <> '' THEN
                    r_adv_refusals[k] := r_adv_refusals[k] + 1;
                END IF;
                r_touched[k] := true;
                nl := nl + 1;
                l_run := l_run || r_id[k]; l_req := l_req || p_request_ids[i];
                l_decision := l_decision || 'grant'::text;
                l_reason := l_reason || nullif(v_adv_reason, '');
                l_res := l_res || p_reservation_ids[i]; l_model := l_model || p_models[i];
                l_version := l_version || r_version[k];
                l_c1 := l_c1 || 0::bigint; l_c2 := l_c2 || 0::bigint;
                l_c3 := l_c3 || 0::bigint; l_c4 := l_c4 || 0::bigint;
                l_h1 := l_h1 || g[1]; l_h2 := l_h2 || g[2];
                l_h3 := l_h3 || g[3]; l_h4 := l_h4 || g[4];
                l_c5 := l_c5 || 0::bigint; l_h5 := l_h5 || g[5];
                l_pools := l_pools || v_ledger_pools; l_detail := l_detail || NULL::jsonb;
                v_tally := v_tally || jsonb_build_object(
                    'outcome', CASE WHEN v_adv_reason <> '' THEN 'advisory_refused'
                                    ELSE 'granted' END,
                    'reason', v_adv_reason, 'opened', 1);
                IF bd IS NOT NULL THEN
                    v_tally := v_tally || jsonb_build_object('breach_dim', names[bd]);
                END IF;
                v_done := true;
            END IF;

        ELSIF v_kind IN ('consume', 'release') THEN
            IF v_kind = 'release' AND p_reservation_ids[i] = '' THEN
                outcomes[i] := 'refused';
                refusals[i] := jsonb_build_object('reason', 'RESERVATION_NOT_FOUND');
                tallies[i] := v_tally;
                CONTINUE;
            END IF;
            IF p_reservation_ids[i] <> '' THEN
                FOR j IN 1..nh LOOP
                    IF h_id[j] = p_reservation_ids[i] AND h_run[j] = k THEN
                        h := j;
                        EXIT;
                    END IF;
                END LOOP;
                IF h IS NULL THEN
                    outcomes[i] := 'refused';
                    refusals[i] := jsonb_build_object('reason', 'RESERVATION_NOT_FOUND');
                    tallies[i] := v_tally;
                    CONTINUE;
                END IF;
                IF h_state[h] = 'consumed' OR (v_kind = 'release' AND h_state[h] <> 'open') THEN
                    outcomes[i] := 'refused';
                    refusals[i] := jsonb_build_object('reason', 'RESERVATION_SETTLED',
                                                      'state', h_state[h]);
                    tallies[i] := v_tally || jsonb_build_object(
                        'outcome', 'refused', 'reason', 'RESERVATION_SETTLED');
                    CONTINUE;
                END IF;
            END IF;
            IF v_kind = 'release' THEN
                v_slots := coalesce(string_to_array(nullif(h_slots[h], ''), ',')::integer[],
                                    '{}');
                FOR d IN 1..4 LOOP
                    IF h_gr[h][d] > r_held[k][d] THEN
                        RAISE EXCEPTION 'hold % settles more than its run holds', h_id[h];
                    END IF;
                    r_held[k][d] := r_held[k][d] - h_gr[h][d];
                END LOOP;
                v_ledger_pools := '[]';
                FOREACH m IN ARRAY v_slots LOOP
                    v_ledger_pools := v_ledger_pools || jsonb_build_object('scope', p_scope[m],
                        'scope_id', p_scope_id[m],
                        'window_start', budget.iso_utc_v1(p_window[m]));
                    CONTINUE WHEN NOT p_found[m];
                    p_touched[m] := true;
                    FOR d IN 1..5 LOOP
                        p_held[m][d] := p_held[m][d] - h_gr[h][d];
                    END LOOP;
                END LOOP;
                h_state[h] := 'released';
                v_ended := v_ended + CASE WHEN h_was_open[h] THEN 1 ELSE 0 END;
                r_touched[k] := true;
                nl := nl + 1;
                l_run := l_run || r_id[k]; l_req := l_req || p_request_ids[i];
                l_decision := l_decision || 'release'::text; l_reason := l_reason || NULL::text;
                l_res := l_res || h_id[h]; l_model := l_model || h_model[h];
                l_version := l_version || r_version[k];
                l_c1 := l_c1 || 0::bigint; l_c2 := l_c2 || 0::bigint;
                l_c3 := l_c3 || 0::bigint; l_c4 := l_c4 || 0::bigint;
                l_h1 := l_h1 || -h_gr[h][1]; l_h2 := l_h2 || -h_gr[h][2];
                l_h3 := l_h3 || -h_gr[h][3]; l_h4 := l_h4 || -h_gr[h][4];
                l_c5 := l_c5 || 0::bigint; l_h5 := l_h5 || -h_gr[h][5];
                l_pools := l_pools || v_ledger_pools; l_detail := l_detail || NULL::jsonb;
                v_tally := v_tally || jsonb_build_object('outcome', 'recorded',
                                                         'ended', 'released');
                v_done := true;
            ELSE
                -- Consume: usage is recorded; it settles the named hold if still open.
                v_settles := h IS NOT NULL AND h_state[h] = 'open';
                IF h IS NOT NULL THEN
                    v_hold_state := CASE WHEN v_settles THEN 'consumed' ELSE h_state[h] END;
                END IF;
                IF v_settles THEN
                    g := ARRAY[h_gr[h][1], h_gr[h][2], h_gr[h][3], h_gr[h][4], h_gr[h][5]];
                    -- The hold's model call is the call this Consume records.
                    amt[i][5] := greatest(amt[i][5], h_gr[h][5]);
                    v_slots := coalesce(string_to_array(nullif(h_slots[h], ''),
                                                        ',')::integer[], '{}');
                END IF;
                v_invalid := NULL;
                <<fits>>
                FOR d IN 1..4 LOOP
                    IF g[d] > r_held[k][d] THEN
                        RAISE EXCEPTION 'hold % settles more than its run holds', h_id[h];
                    END IF;
                    IF r_used[k][d]::numeric + amt[i][d] > max_total THEN
                        v_invalid := 'usage.' || fields[d];
                        EXIT fits;
                    END IF;
                END LOOP;
                IF v_invalid IS NULL THEN
                    <<pool_fits>>
                    FOREACH m IN ARRAY v_slots LOOP
                        CONTINUE WHEN NOT p_found[m];
                        FOR d IN 1..5 LOOP
                            IF p_used[m][d]::numeric + amt[i][d] > max_total THEN
                                v_invalid := 'usage.' || fields[d];
                                EXIT pool_fits;
                            END IF;
                        END LOOP;
                    END LOOP;
                END IF;
                IF v_invalid IS NOT NULL THEN
                    outcomes[i] := 'invalid';
                    refusals[i] := jsonb_build_object('reason', 'VALIDATION_FAILED',
                                                      'field', v_invalid);
                    CONTINUE;
                END IF;
                v_first_breach := NULL;
                v_crossed := '{}'; v_exhausted := '{}'; v_breached := '{}';
                v_pool_crossed := '{}'; v_pool_exhausted := '{}';
                FOR d IN 1..4 LOOP
                    r_used[k][d] := r_used[k][d] + amt[i][d];
                    r_held[k][d] := r_held[k][d] - g[d];
                    IF v_settles THEN
                        overrun[d] := greatest(0, amt[i][d] - g[d]);
                    END IF;
                    lim := r_lim[k][d];
                    used := r_used[k][d];
                    CONTINUE WHEN amt[i][d] = 0 OR lim IS NULL;
                    ne := ne + 1;
                    e_run := e_run || r_id[k]; e_type := e_type || 'budget.consumed'::text;
                    e_seq := e_seq || (r_next_seq[k] + r_events[k]);
                    r_events[k] := r_events[k] + 1;
                    e_payload := e_payload || format(
                        '{"dimension":"%s","consumed":%s,"limit":%s,"remaining":%s}',
                        names[d], budget.amount_text(d, used), budget.amount_text(d, lim),
                        budget.amount_text(d, greatest(0, lim - used)));
                    IF (r_crossed[k] >> (d - 1)) & 1 = 0 AND used > 0
                       AND used::numeric * 100 >= lim::numeric * r_threshold[k] THEN
                        r_crossed[k] := r_crossed[k] | (1 << (d - 1));
                        v_crossed := v_crossed || names[d];
                        ne := ne + 1;
                        e_run := e_run || r_id[k];
                        e_type := e_type || 'budget.threshold.crossed'::text;
                        e_seq := e_seq || (r_next_seq[k] + r_events[k]);
                        r_events[k] := r_events[k] + 1;
                        e_payload := e_payload || format(
                            '{"dimension":"%s","consumed":%s,"limit":%s,"percent":%s}',
                            names[d], budget.amount_text(d, used), budget.amount_text(d, lim),
                            r_threshold[k]);
                    END IF;
                    IF (r_exhausted[k] >> (d - 1)) & 1 = 0 AND used >= lim THEN
                        r_exhausted[k] := r_exhausted[k] | (1 << (d - 1));
                        v_exhausted := v_exhausted || names[d];
                        ne := ne + 1;
                        e_run := e_run || r_id[k]; e_type := e_type || 'budget.exhausted'::text;
                        e_seq := e_seq || (r_next_seq[k] + r_events[k]);
                        r_events[k] := r_events[k] + 1;
                        e_payload := e_payload || format(
                            '{"dimension":"%s","consumed":%s,"limit":%s}', names[d],
                            budget.amount_text(d, used), budget.amount_text(d, lim));
                    END IF;
                    -- Exactly spent is exhausted, not breached; a stopped run breaches once.
                    IF used > lim AND r_state[k] = 'active' THEN
                        IF NOT v_adv THEN  -- advisory: no cap.breached (RFC 0084 section E)
                            r_breached[k] := r_breached[k] | (1 << (d - 1));
                            v_breached := v_breached || names[d];
                            ne := ne + 1;
                            e_run := e_run || r_id[k]; e_type := e_type || 'cap.breached'::text;
                            e_seq := e_seq || (r_next_seq[k] + r_events[k]);
                            r_events[k] := r_events[k] + 1;
                            e_payload := e_payload || format(
                                '{"kind":"%s","limit":%s,"observed":%s}', breach_kinds[d],
                                budget.amount_text(d, lim), budget.amount_text(d, used));
                        END IF;
                        IF v_first_breach IS NULL THEN
                            v_first_breach := d;
                            b_lim := lim;
                            b_obs := used;
                        END IF;
                    END IF;
                END LOOP;
                IF NOT v_adv AND v_first_breach IS NOT NULL THEN
                    d := v_first_breach;
                    r_stop_dim[k] := names[d]; r_stop_lim[k] := b_lim;
                    r_stop_used[k] := b_obs; r_stop_obs[k] := b_obs;
                    r_stop_scope[k] := 'run'; r_stop_scope_id[k] := '';
                    IF r_on_exh[k] = 'interrupt' THEN
                        r_state[k] := 'interrupted';
                    ELSE
                        r_state[k] := 'failed';
                        v_message := format('budget exhausted: %s limit %s, observed %s',
                            names[d], budget.amount_text(d, b_lim), budget.amount_text(d, b_obs));
                        ne := ne + 1;
                        e_run := e_run || r_id[k]; e_type := e_type || 'run.failed'::text;
                        e_seq := e_seq || (r_next_seq[k] + r_events[k]);
                        r_events[k] := r_events[k] + 1;
                        e_payload := e_payload || format(
                            '{"error":{"code":"budget_exhausted","message":%s}}',
                            to_json(v_message)::text);
                    END IF;
                END IF;
                v_ledger_pools := '[]';
                FOREACH m IN ARRAY v_slots LOOP
                    v_ledger_pools := v_ledger_pools || jsonb_build_object('scope', p_scope[m],
                        'scope_id', p_scope_id[m],
                        'window_start', budget.iso_utc_v1(p_window[m]));
                    CONTINUE WHEN NOT p_found[m];
                    p_touched[m] := true;
                    FOR d IN 1..5 LOOP
                        IF g[d] > p_held[m][d] THEN
                            RAISE EXCEPTION 'hold % settles more than its pool holds',
                                p_reservation_ids[i];
                        END IF;
                        p_used[m][d] := p_used[m][d] + amt[i][d];
                        p_held[m][d] := p_held[m][d] - g[d];
                        -- The pool's own events, once per pool, window and dimension.
                        CONTINUE WHEN amt[i][d] = 0 OR p_lim[m][d] IS NULL;
                        lim := p_lim[m][d];
                        used := p_used[m][d];
                        IF (p_crossed[m] >> (d - 1)) & 1 = 0 AND used > 0
                           AND used::numeric * 100 >= lim::numeric * p_threshold[m] THEN
                            p_crossed[m] := p_crossed[m] | (1 << (d - 1));
                            v_pool_crossed := v_pool_crossed || names[d];
                            npe := npe + 1;
                            pe_slot := pe_slot || m;
                            pe_seq := pe_seq || (p_next_seq[m] + p_events[m]);
                            p_events[m] := p_events[m] + 1;
                            pe_type := pe_type || 'budget.threshold.crossed'::text;
                            pe_payload := pe_payload || format(
                                '{"dimension":"%s","consumed":%s,"limit":%s,"percent":%s}',
                                names[d], budget.amount_text(d, used),
                                budget.amount_text(d, lim), p_threshold[m]);
                        END IF;
                        IF (p_exhausted[m] >> (d - 1)) & 1 = 0 AND used >= lim THEN
                            p_exhausted[m] := p_exhausted[m] | (1 << (d - 1));
                            v_pool_exhausted := v_pool_exhausted || names[d];
                            npe := npe + 1;
                            pe_slot := pe_slot || m;
                            pe_seq := pe_seq || (p_next_seq[m] + p_events[m]);
                            p_events[m] := p_events[m] + 1;
                            pe_type := pe_type || 'budget.exhausted'::text;
                            pe_payload := pe_payload || format(
                                '{"dimension":"%s","consumed":%s,"limit":%s}', names[d],
                                budget.amount_text(d, used), budget.amount_text(d, lim));
                        END IF;
                    END LOOP;
                END LOOP;
                IF v_settles THEN
                    h_state[h] := 'consumed';
                    v_ended := v_ended + CASE WHEN h_was_open[h] THEN 1 ELSE 0 END;
                END IF;
                r_touched[k] := true;
                nl := nl + 1;
                l_run := l_run || r_id[k]; l_req := l_req || p_request_ids[i];
                l_decision := l_decision || 'consume'::text; l_reason := l_reason || NULL::text;
                l_res := l_res || nullif(p_reservation_ids[i], '');
                l_model := l_model || p_models[i];
                l_version := l_version || r_version[k];
                l_c1 := l_c1 || amt[i][1]; l_c2 := l_c2 || amt[i][2];
                l_c3 := l_c3 || amt[i][3]; l_c4 := l_c4 || amt[i][4];
                l_h1 := l_h1 || -g[1]; l_h2 := l_h2 || -g[2];
                l_h3 := l_h3 || -g[3]; l_h4 := l_h4 || -g[4];
                l_c5 := l_c5 || amt[i][5]; l_h5 := l_h5 || -g[5];
                l_pools := l_pools || v_ledger_pools; l_detail := l_detail || NULL::jsonb;
                v_tally := v_tally || jsonb_build_object(
                    'outcome', 'recorded', 'project', r_project[k],
                    'ended', CASE WHEN v_settles THEN 'consumed' END,
                    'crossed', to_jsonb(v_crossed), 'exhausted', to_jsonb(v_exhausted),
                    'breached', to_jsonb(v_breached), 'overrun', to_jsonb(overrun),
                    'pool_crossed', to_jsonb(v_pool_crossed),
                    'pool_exhausted', to_jsonb(v_pool_exhausted));
                v_done := true;
            END IF;
        ELSE
            RAISE EXCEPTION 'unknown decision kind %', v_kind;
        END IF;

        CONTINUE WHEN NOT v_done;
        -- The reply: balances after this decision (run first, then its pools' bounded ones).
        v_status := '';
        FOR d IN 1..4 LOOP
            v_scope := coalesce(r_binding[k] ->> names[d], 'run');
            v_status := v_status || CASE WHEN d = 1 THEN '' ELSE ',' END || json_build_array(
                names[d], r_lim[k][d], r_used[k][d], r_held[k][d],
                CASE v_scope WHEN 'host' THEN 'run' ELSE v_scope END,
                CASE v_scope WHEN 'workflow' THEN r_workflow[k] WHEN 'agent' THEN r_agent[k]
                             WHEN 'project' THEN r_project[k] ELSE '' END,
                CASE v_scope WHEN 'host' THEN 'host' ELSE '' END)::text;
        END LOOP;
        FOREACH m IN ARRAY coalesce(string_to_array(nullif(r_pools[k], ''), ',')::integer[],
                                    '{}') LOOP
            FOR d IN 1..5 LOOP
                CONTINUE WHEN p_lim[m][d] IS NULL;
                -- A windowed pool's row ends with when its window ends.
                v_status := v_status || ',' || CASE
                    WHEN coalesce(p_window_kind[m], 'none') = 'none' THEN json_build_array(
                        names[d], p_lim[m][d], p_used[m][d], p_held[m][d] - p_other[m][d],
                        p_scope[m], p_scope_id[m], '')
                    ELSE json_build_array(
                        names[d], p_lim[m][d], p_used[m][d], p_held[m][d] - p_other[m][d],
                        p_scope[m], p_scope_id[m], '',
                        budget.epoch_us(budget.window_end_v1(p_window_kind[m], p_window[m])))
                    END::text;
            END LOOP;
        END LOOP;
        v_status := '[' || v_status || ']';
        IF h IS NOT NULL AND v_kind IN ('reserve', 'release') THEN
            v_pools_json := '';
            FOREACH m IN ARRAY coalesce(string_to_array(nullif(h_slots[h], ''),
                                                        ',')::integer[], '{}') LOOP
                v_pools_json := v_pools_json || CASE WHEN v_pools_json = '' THEN '' ELSE ','
                                                END
                    || json_build_array(p_scope[m], p_scope_id[m],
                                        budget.epoch_us(p_window[m]))::text;
            END LOOP;
            v_hold_doc := json_build_object(
                'id', h_id[h], 'run', r_id[k], 'model', h_model[h],
                'requested', ARRAY[h_req[h][1], h_req[h][2], h_req[h][3], h_req[h][4]],
                'granted', ARRAY[h_gr[h][1], h_gr[h][2], h_gr[h][3], h_gr[h][4]],
                'state', h_state[h], 'pools', ('[' || v_pools_json || ']')::json,
                'created_us', budget.epoch_us(h_created[h]),
                'expires_us', budget.epoch_us(h_expires[h]), 'model_calls', h_gr[h][5]);
        END IF;
        IF v_kind = 'check' THEN
            v_reply := json_build_object(
                'reason', v_reason, 'advisory_reason', v_adv_reason, 'state', r_state[k],
                'dimensions', v_status::json,
                'denied_by', CASE WHEN p_models[i] = '' THEN NULL
                                  ELSE coalesce(v_denied, '') END,
                'denied_by_id', CASE v_denied WHEN 'workflow' THEN r_workflow[k]
                                              WHEN 'agent' THEN r_agent[k]
                                              WHEN 'project' THEN r_project[k] ELSE '' END
                )::text;
            outcomes[i] := 'checked';
        ELSIF v_kind = 'reserve' THEN
            v_reply := json_build_object('hold', v_hold_doc, 'dimensions', v_status::json,
                                         'advisory_reason', v_adv_reason)::text;
        ELSIF v_kind = 'consume' THEN
            v_reply := json_build_object('overrun', overrun, 'dimensions', v_status::json,
                                         'state', r_state[k], 'hold_state', v_hold_state)::text;
        ELSE
            v_reply := json_build_object('hold', v_hold_doc)::text;
        END IF;
        responses[i] := convert_to(v_reply, 'UTF8');
        IF v_kind <> 'check' THEN
            outcomes[i] := 'done';
            q_req := q_req || p_request_ids[i];
            q_fp := q_fp || p_fingerprints[i];
            q_resp := q_resp || responses[i];
            v_tally := v_tally || jsonb_build_object(
                'events', to_jsonb(e_type[v_events_before + 1:ne]));
        END IF;
        tallies[i] := v_tally;
    END LOOP;

    IF p_read_only THEN
        RETURN;
    END IF;

    -- 6. Writes: each touched run and pool row once, then holds, ledger, events, replies.
    -- One UPDATE per touched run, from scalars (each plan is cached once, generic).
    FOR k IN 1..nr LOOP
        CONTINUE WHEN NOT r_touched[k];
        w_id := r_id[k]; w_state := r_state[k];
        w_u1 := r_used[k][1]; w_u2 := r_used[k][2]; w_u3 := r_used[k][3];
        w_u4 := r_used[k][4]; w_h1 := r_held[k][1]; w_h2 := r_held[k][2];
        w_h3 := r_held[k][3]; w_h4 := r_held[k][4];
        w_crossed := budget.flag_names_v1(r_crossed[k]);
        w_exhausted := budget.flag_names_v1(r_exhausted[k]);
        w_breached := budget.flag_names_v1(r_breached[k]);
        w_sd := r_stop_dim[k]; w_sl := r_stop_lim[k]; w_su := r_stop_used[k];
        w_so := r_stop_obs[k]; w_ss := r_stop_scope[k]; w_ssi := r_stop_scope_id[k];
        w_events := r_events[k]; w_adv := r_adv_refusals[k];
        UPDATE budget.runs SET
            state = w_state,
            consumed_tokens = w_u1, consumed_cost_nanos = w_u2,
            consumed_tool_calls = w_u3, consumed_retries = w_u4,
            held_tokens = w_h1, held_cost_nanos = w_h2,
            held_tool_calls = w_h3, held_retries = w_h4,
            crossed = w_crossed, exhausted = w_exhausted, breached = w_breached,
            stopped_dimension = w_sd, stopped_limit = w_sl, stopped_consumed = w_su,
            stopped_observed = w_so, stopped_scope = w_ss, stopped_scope_id = w_ssi,
            next_seq = next_seq + w_events,
            advisory_refusals = advisory_refusals + w_adv,
            updated_at = v_now
        WHERE tenant_id = p_tenant AND run_id = w_id;
    END LOOP;
    -- And per touched pool row.
    FOR m IN 1..np LOOP
        CONTINUE WHEN NOT (p_touched[m] AND p_found[m]);
        w_scope := p_scope[m]; w_scope_id := p_scope_id[m]; w_window := p_window[m];
        w_u1 := p_used[m][1]; w_u2 := p_used[m][2]; w_u3 := p_used[m][3];
        w_u4 := p_used[m][4]; w_h1 := p_held[m][1]; w_h2 := p_held[m][2];
        w_h3 := p_held[m][3]; w_h4 := p_held[m][4];
        w_u5 := p_used[m][5]; w_h5 := p_held[m][5];
        w_crossed := budget.flag_names_v1(p_crossed[m]);
        w_exhausted := budget.flag_names_v1(p_exhausted[m]);
        w_events := p_events[m];
        UPDATE budget.pool_balances SET
            consumed_tokens = w_u1, consumed_cost_nanos = w_u2,
            consumed_tool_calls = w_u3, consumed_retries = w_u4,
            held_tokens = w_h1, held_cost_nanos = w_h2,
            held_tool_calls = w_h3, held_retries = w_h4,
            consumed_model_calls = w_u5, held_model_calls = w_h5,
            crossed = w_crossed, exhausted = w_exhausted, next_seq = next_seq + w_events
        WHERE tenant_id = p_tenant AND scope = w_scope AND scope_id = w_scope_id
          AND window_start = w_window;
    END LOOP;
    IF npe > 0 THEN
        INSERT INTO budget.pool_events (
            tenant_id, scope, scope_id, window_start, seq, type, payload_json, created_at)
        SELECT p_tenant, p_scope[x.slot], p_scope_id[x.slot], p_window[x.slot], x.seq, x.type,
               x.payload, v_now
        FROM unnest(pe_slot, pe_seq, pe_type, pe_payload) AS x(slot, seq, type, payload);
    END IF;
    -- Holds that were open and ended here, one guarded UPDATE each (a primary-key lookup), so
    -- a hold never ends twice.
    FOR h IN 1..CASE WHEN v_ended > 0 THEN nh ELSE 0 END LOOP
        CONTINUE WHEN NOT h_was_open[h] OR h_state[h] = 'open';
        w_id := h_id[h]; w_run := r_id[h_run[h]]; w_state := h_state[h];
        UPDATE budget.holds SET state = w_state, ended_at = v_now
        WHERE tenant_id = p_tenant AND run_id = w_run AND reservation_id = w_id
          AND state = 'open';
        GET DIAGNOSTICS w_count = ROW_COUNT;
        IF w_count <> 1 THEN
            RAISE EXCEPTION 'a hold ended concurrently' USING ERRCODE = 'serialization_failure';
        END IF;
    END LOOP;
    -- New holds, one INSERT each from scalars.
    FOR h IN 1..nh LOOP
        CONTINUE WHEN NOT h_new[h];
        w_id := h_id[h]; w_run := r_id[h_run[h]]; w_state := h_state[h];
        v_slots := coalesce(string_to_array(nullif(h_slots[h], ''), ',')::integer[], '{}');
        w_pscopes := '{}'; w_pids := '{}'; w_pwindows := '{}';
        FOREACH m IN ARRAY v_slots LOOP
            w_pscopes := w_pscopes || p_scope[m];
            w_pids := w_pids || p_scope_id[m];
            w_pwindows := w_pwindows || p_window[m];
        END LOOP;
        w_u1 := h_req[h][1]; w_u2 := h_req[h][2]; w_u3 := h_req[h][3]; w_u4 := h_req[h][4];
        w_h1 := h_gr[h][1]; w_h2 := h_gr[h][2]; w_h3 := h_gr[h][3]; w_h4 := h_gr[h][4];
        w_h5 := h_gr[h][5];
        w_model := h_model[h]; w_version := h_version[h];
        w_created := h_created[h]; w_expires := h_expires[h];
        INSERT INTO budget.holds (
            tenant_id, run_id, reservation_id, model,
            requested_tokens, requested_cost_nanos, requested_tool_calls, requested_retries,
            granted_tokens, granted_cost_nanos, granted_tool_calls, granted_retries,
            granted_model_calls, pool_scopes, pool_scope_ids, pool_windows, state, policy_version, created_at,
            expires_at, ended_at)
        VALUES (
            p_tenant, w_run, w_id, w_model, w_u1, w_u2, w_u3, w_u4, w_h1, w_h2, w_h3, w_h4,
            w_h5, w_pscopes, w_pids, w_pwindows, w_state, w_version, w_created, w_expires,
            CASE WHEN w_state = 'open' THEN NULL ELSE v_now END);
    END LOOP;
    IF nl > 0 THEN
        INSERT INTO budget.ledger (
            tenant_id, run_id, request_id, decision, reason, reservation_id, model,
            policy_version, consumed_tokens, consumed_cost_nanos, consumed_tool_calls,
            consumed_retries, held_tokens, held_cost_nanos, held_tool_calls, held_retries,
            consumed_model_calls, held_model_calls, pools, detail, created_at)
        SELECT p_tenant, x.run_id, x.req, x.decision, x.reason, x.res, x.model, x.version,
               x.c1, x.c2, x.c3, x.c4, x.h1, x.h2, x.h3, x.h4, x.c5, x.h5, x.pools, x.detail,
               v_now
        FROM unnest(l_run, l_req, l_decision, l_reason, l_res, l_model, l_version,
                    l_c1, l_c2, l_c3, l_c4, l_h1, l_h2, l_h3, l_h4, l_c5, l_h5, l_pools,
                    l_detail)
             WITH ORDINALITY
             AS x(run_id, req, decision, reason, res, model, version, c1, c2, c3, c4,
                  h1, h2, h3, h4, c5, h5, pools, detail, o)
        ORDER BY x.o;
    END IF;
    IF ne > 0 THEN
        INSERT INTO budget.events (tenant_id, run_id, seq, type, payload_json, created_at)
        SELECT p_tenant, x.run_id, x.seq, x.type, x.payload, v_now
        FROM unnest(e_run, e_seq, e_type, e_payload) AS x(run_id, seq, type, payload);
        -- WatchRunEvents (store/watchers.py): registering waits for the run's lock, held here.
        PERFORM pg_notify('ration_budget_events',
                          json_build_array(p_tenant, x.run_id, max(x.seq))::text)
        FROM unnest(e_run, e_seq) AS x(run_id, seq)
        WHERE EXISTS (SELECT 1 FROM budget.watchers w
                      WHERE w.tenant_id = p_tenant AND w.run_id = x.run_id)
        GROUP BY x.run_id;
    END IF;
    IF cardinality(q_req) > 0 THEN
        INSERT INTO budget.request_log (tenant_id, request_id, fingerprint, response)
        SELECT p_tenant, x.req, x.fp, x.resp FROM unnest(q_req, q_fp, q_resp) AS x(req, fp, resp);
    END IF;
END;
$$;
