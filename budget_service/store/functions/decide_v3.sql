-- budget.decide_v3: The entry point of the engine: one tenant's batch of Reserve, Consume,
-- Release (or, read-only, Check) items, decided and committed as one statement.
--
-- p_mode: 'skip' (a tenant's batch): the items of a run locked elsewhere are answered 'busy'
-- and left untouched, so one locked run does not hold up the tenant's others (issue 24);
-- 'wait' (a run's own lane, for the items that came back busy): waits for the run's lock;
-- 'read': a Check, no locks, no writes. decide_v2 (the release before) is 'wait' or 'read'.
-- p_lock_wait_ms, unless NULL, bounds each wait for a lock (lock_timeout, for this statement's
-- transaction only): the lane passes what its calls' deadline leaves, so a run that stays
-- locked fails the lane's batch with lock_not_available (STORE_BUSY, store/decisions.py) and
-- frees its connection at the deadline instead of waiting on to the statement timeout.
--
-- p_items is one array of budget.decide_item_v2 (migration 0014), in arrival order; the answer
-- is one element per item in each of the four arrays (see decide_batch_v3.sql, the engine).
-- Its tenant argument is p_tenant, so on Citus the call is delegated to the worker that holds
-- the tenant's shard (servicekit/citus.py), where the engine runs as a local call.
CREATE OR REPLACE FUNCTION budget.decide_v3(
    p_tenant text, p_host_advisory boolean, p_mode text, p_lock_wait_ms integer,
    p_items budget.decide_item_v2[],
    OUT outcomes text[], OUT responses bytea[], OUT refusals jsonb[], OUT tallies jsonb[])
LANGUAGE plpgsql
-- Generic plans: the engine's statements are the same for every batch, and custom plans
-- (chosen for array arguments) would be planned again on every call. The setting holds for
-- the whole call, the engine's nested functions included.
SET plan_cache_mode = force_generic_plan
AS $$
BEGIN
    IF p_lock_wait_ms IS NOT NULL THEN
        PERFORM set_config('lock_timeout', greatest(p_lock_wait_ms, 1) || 'ms', true);
    END IF;
    SELECT d.outcomes, d.responses, d.refusals, d.tallies
    INTO outcomes, responses, refusals, tallies
    FROM budget.decide_batch_v3(p_tenant, p_host_advisory, p_mode, p_items) d;
END;
$$;
