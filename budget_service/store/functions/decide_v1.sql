-- budget.decide_v1: The previous release's entry point of the engine, kept for a rolling
-- deploy (a replica of 0.1.0 calls it beside replicas calling decide_v2); a later migration
-- drops it once no supported release calls it.
--
-- Its twelve parallel arrays (one element per item) become one budget.decide_item_v2 array
-- and go to the one engine, budget.decide_batch_v2, so both entry points decide alike.
CREATE OR REPLACE FUNCTION budget.decide_v1(
    p_tenant text, p_host_advisory boolean, p_read_only boolean,
    p_kinds text[], p_request_ids text[], p_fingerprints bytea[], p_run_ids text[],
    p_reservation_ids text[], p_models text[],
    p_tokens bigint[], p_cost bigint[], p_tool_calls bigint[], p_retries bigint[],
    p_up_to boolean[], p_ttl_seconds integer[],
    OUT outcomes text[], OUT responses bytea[], OUT refusals jsonb[], OUT tallies jsonb[])
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
AS $$
BEGIN
    SELECT d.outcomes, d.responses, d.refusals, d.tallies
    INTO outcomes, responses, refusals, tallies
    FROM budget.decide_batch_v2(p_tenant, p_host_advisory, p_read_only, ARRAY(
        SELECT ROW(x.kind, x.request_id, x.fingerprint, x.run_id, x.reservation_id, x.model,
                   x.tokens, x.cost, x.tool_calls, x.retries, x.up_to,
                   x.ttl_seconds)::budget.decide_item_v2
        FROM unnest(p_kinds, p_request_ids, p_fingerprints, p_run_ids, p_reservation_ids,
                    p_models, p_tokens, p_cost, p_tool_calls, p_retries, p_up_to,
                    p_ttl_seconds) WITH ORDINALITY
             AS x(kind, request_id, fingerprint, run_id, reservation_id, model, tokens, cost,
                  tool_calls, retries, up_to, ttl_seconds, o)
        ORDER BY x.o)) d;
END;
$$;
