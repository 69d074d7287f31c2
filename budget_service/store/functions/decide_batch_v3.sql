-- budget.decide_batch_v3: The engine: decides every Reserve, Consume, Release and Check of one
-- tenant's batch. Called by budget.decide_v3 (and, through budget.decide_batch_v2, by the
-- waiting entries decide_v2 and decide_v1 of the releases before); its argument is not named
-- p_tenant, so on Citus it is created on every node and runs where the delegated caller runs
-- (servicekit/citus.py delegates by p_tenant).
--
-- p_mode says how the batch takes its runs' locks (budget.lock_runs_v3): 'skip' decides the
-- items of the runs it could lock at once and answers the others 'busy' (issue 24: a run
-- locked elsewhere delays only its own calls; the caller sends those again in 'wait' mode,
-- per run); 'wait' waits for every run's lock, as decide_v2 always did; 'read' is a Check.
--
-- The ledger decides (DESIGN 3.3): every rule of Reserve, Consume, Release and Check lives
-- here, once, in the engine. It takes a batch (budget.decide_item_v2[], in arrival order)
-- of one tenant, and is one statement, so one transaction: the per-process
-- group-commit batcher (servicekit/batching.py) sends the mutations in flight together and
-- answers each caller after COMMIT. One item is a batch of one.
--
-- A batch, in order:
--   1. enters the tenant (row-level security, migration 0005) from its argument;
--   2. locks the runs of the batch in run_id order (COLLATE "C"); in 'skip' mode the items of
--      a run locked elsewhere are answered 'busy' and nothing more is done for them (no stored
--      reply, hold or pool row is looked up; nothing is written or counted). Then it looks up
--      the request log: a stored request id replays its reply (same fingerprint) or is
--      REQUEST_ID_REUSED (read after the lock, so a twin on the same run that committed
--      meanwhile replays); later in the batch, a request id stored by an earlier item replays
--      or is reused the same way (an earlier item that was refused stored nothing, so its twin
--      is decided again);
--   3. then creates the current window rows of their pools and locks every pool row it may
--      change in the canonical order (scope workflow < agent < project, scope_id,
--      window_start), the order every writer uses, so batches of two replicas and the sweeper
--      cannot deadlock. With 'skip' too: a 'skip' batch never waits for a run, and a 'wait'
--      batch (the per-run lane: one run; decide_v2: runs in order), the sweeper and the
--      lifecycle calls (budget.lock_run_v1: one run) wait for runs only while holding no pool
--      row; pool rows are taken by everyone in one order, so no cycle of waits can form;
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
-- In 'read' mode (Check) the same code runs without locks and writes nothing: overdue holds
-- simply do not count, and a 'check' item is judged exactly as a Reserve would be.
--
-- Each item's answer: outcomes[i] one of done, replay, reused, not_found, refused, invalid,
-- checked, busy; responses[i] the reply document (store/stored_replies.py) for done and
-- replay, or the Check verdict; refusals[i] the reason and its facts; tallies[i] what metrics
-- count (nothing for busy).
-- A twin request id committed meanwhile by another replica makes the request-log insert fail
-- with unique_violation: the caller runs the batch again, which replays it.
--
-- Versioned by name: an incompatible rule change is budget.decide_v4 beside decide_v3, and a
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
CREATE OR REPLACE FUNCTION budget.decide_batch_v3(
    batch_tenant text, p_host_advisory boolean, p_mode text,
    p_items budget.decide_item_v2[],
    OUT outcomes text[], OUT responses bytea[], OUT refusals jsonb[], OUT tallies jsonb[])
LANGUAGE plpgsql AS $$
#variable_conflict use_variable
DECLARE
    tenant constant text := batch_tenant;
    read_only constant boolean := p_mode = 'read';
    n constant integer := coalesce(cardinality(p_items), 0);
    v_now constant timestamptz := now();
    run_ids text[]; named_runs text[]; named_ids text[]; deciding text[] := '{}';
    runs budget.engine_run_v2[] := '{}'; pools budget.engine_pool_v2[] := '{}';
    holds budget.engine_hold_v2[] := '{}'; ledger budget.engine_ledger_v2[] := '{}';
    events budget.engine_event_v2[] := '{}';
    q_req text[] := '{}'; q_fp bytea[] := '{}'; q_resp bytea[] := '{}';  -- replies to store
    item_run integer[]; it budget.decide_item_v2; amounts bigint[]; slots integer[];
    loaded record; step record; k integer; h integer; j integer; adv boolean;
BEGIN
    PERFORM budget.enter_tenant_v1(tenant);
    outcomes := array_fill(NULL::text, ARRAY[n]);
    responses := array_fill(NULL::bytea, ARRAY[n]);
    refusals := array_fill(NULL::jsonb, ARRAY[n]);
    tallies := array_fill(NULL::jsonb, ARRAY[n]);
    item_run := array_fill(NULL::integer, ARRAY[n]);
    IF n = 0 THEN
        RETURN;
    END IF;
    -- 1. The batch's keys: its runs, and the holds its Consume and Release items name.
    SELECT * INTO run_ids, named_runs, named_ids FROM budget.batch_keys_v2(p_items);
    -- 2. The runs, locked; then the stored replies, read once the runs are locked: a twin on
    -- the same run that committed while this batch waited for the lock replays.
    loaded := budget.lock_runs_v3(tenant, run_ids, p_mode, v_now);
    runs := loaded.runs;
    IF cardinality(loaded.busy_ids) > 0 THEN  -- 'skip': runs locked elsewhere are left alone
        SELECT * INTO outcomes, named_runs, named_ids FROM budget.busy_items_v1(
            p_items, loaded.busy_ids, outcomes, named_runs, named_ids);
    END IF;
    IF NOT read_only THEN
        SELECT * INTO outcomes, responses
        FROM budget.stored_replies_v2(tenant, p_items, outcomes, responses);
    END IF;
    run_ids := loaded.found_ids;  -- the runs found, in the order of `runs`
    FOR i IN 1..n LOOP  -- each run's first request decided here (its 'expire' rows carry it)
        CONTINUE WHEN outcomes[i] IS NOT NULL;
        k := array_position(run_ids, p_items[i].run_id);
        item_run[i] := k;
        IF k IS NOT NULL AND runs[k].first_request IS NULL THEN
            runs[k].first_request := p_items[i].request_id;
            deciding := deciding || runs[k].run_id;
        END IF;
    END LOOP;
    -- 3. Pool windows and the holds the batch may end; pool rows locked after the runs.
    SELECT * INTO runs, pools, holds FROM budget.batch_pools_v2(
        tenant, runs, named_runs, named_ids, deciding, loaded.any_pools, loaded.any_overdue,
        read_only, v_now);
    -- 4. Expiry: the deciding runs' overdue holds end first.
    IF cardinality(holds) > 0 THEN
        SELECT * INTO runs, pools, holds, ledger
        FROM budget.expire_holds_v2(runs, pools, holds, deciding, v_now);
    END IF;
    -- 5. Each item in arrival order, against what the items before it left.
    FOR i IN 1..n LOOP
        CONTINUE WHEN outcomes[i] IS NOT NULL;
        it := p_items[i];
        IF it.kind NOT IN ('reserve', 'check', 'consume', 'release') THEN
            RAISE EXCEPTION 'unknown decision kind %', it.kind;
        END IF;
        j := CASE WHEN it.kind <> 'check' THEN array_position(q_req, it.request_id) END;
        IF j IS NOT NULL THEN  -- stored earlier in this batch
            outcomes[i] := CASE WHEN q_fp[j] = it.fingerprint THEN 'replay' ELSE 'reused' END;
            responses[i] := CASE WHEN outcomes[i] = 'replay' THEN q_resp[j] END;
            CONTINUE;
        END IF;
        k := item_run[i];
        IF k IS NULL THEN
            outcomes[i] := 'not_found';
            refusals[i] := jsonb_build_object('reason', 'RUN_NOT_FOUND');
            CONTINUE;
        END IF;
        adv := p_host_advisory OR runs[k].scope_advisory;
        -- A Reserve, Check or Consume naming a model is one model call (pools only).
        amounts := ARRAY[coalesce(it.tokens, 0), coalesce(it.cost_nanos, 0),
                         coalesce(it.tool_calls, 0), coalesce(it.retries, 0),
                         CASE WHEN it.kind IN ('reserve', 'check', 'consume')
                                   AND coalesce(it.model, '') <> '' THEN 1 ELSE 0 END];
        -- The pool rows it draws on: a named open hold's own, else the run's current windows.
        slots := CASE WHEN cardinality(runs[k].pools) = 0 THEN '{}'
                      ELSE budget.matching_pools_v2(runs[k].pools, pools, it.model) END;
        h := CASE WHEN it.kind IN ('consume', 'release') AND it.reservation_id <> ''
                  THEN budget.hold_at_v2(holds, it.reservation_id, k) END;
        IF h IS NOT NULL AND (it.kind = 'release' OR holds[h].state = 'open') THEN
            slots := holds[h].pools;
        END IF;
        step := CASE it.kind
            WHEN 'consume' THEN budget.consume_item_v2(it, amounts, runs[k],
                budget.pools_at_v2(pools, slots), holds[h], adv)
            WHEN 'release' THEN budget.release_item_v2(it, runs[k],
                budget.pools_at_v2(pools, slots), holds[h])
            ELSE budget.reserve_item_v2(it, amounts, runs[k],
                budget.pools_at_v2(pools, slots), adv, v_now) END;
        runs[k] := step.run;
        FOR b IN 1..cardinality(slots) LOOP
            pools[slots[b]] := step.pools[b];
        END LOOP;
        IF h IS NOT NULL THEN
            holds[h] := step.hold;
        ELSIF (step.hold).reservation_id IS NOT NULL THEN  -- a new hold
            holds := holds || step.hold;
            h := cardinality(holds);
            holds[h].run := k;
            holds[h].pools := slots;
        END IF;
        IF (step.ledger).run_id IS NOT NULL THEN
            ledger := ledger || step.ledger;
        END IF;
        events := events || coalesce(step.events, '{}');
        outcomes[i] := step.outcome;
        refusals[i] := step.refusal;
        tallies[i] := jsonb_build_object(
            'decision', it.kind, 'enforcement', CASE WHEN adv THEN 'advisory' ELSE 'hard' END,
            'expired', CASE WHEN runs[k].first_request = it.request_id THEN runs[k].expired
                            ELSE 0 END) || step.tally;
        CONTINUE WHEN step.outcome NOT IN ('done', 'checked');
        -- The reply: balances after this decision (the run, then its current pool windows).
        responses[i] := budget.reply_v2(
            it.kind, runs[k], budget.pools_at_v2(pools, runs[k].pools), holds[h],
            CASE WHEN h IS NULL THEN '{}' ELSE budget.pools_at_v2(pools, holds[h].pools) END,
            step.reason, step.advisory_reason, step.denied, it.model, step.overrun,
            step.hold_state);
        CONTINUE WHEN it.kind = 'check';
        q_req := q_req || it.request_id;
        q_fp := q_fp || it.fingerprint;
        q_resp := q_resp || responses[i];
        tallies[i] := tallies[i] || jsonb_build_object('events', budget.run_event_types_v2(
            step.events));
    END LOOP;
    IF NOT read_only THEN  -- 6. Writes.
        PERFORM budget.write_balances_v2(tenant, runs, pools, v_now);
        PERFORM budget.write_records_v2(tenant, runs, pools, holds, ledger, events, q_req, q_fp,
                                        q_resp, v_now);
    END IF;
END;
$$;
