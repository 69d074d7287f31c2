-- budget.reply_dimensions_v2: A reply's per-dimension balances after the decision, as
-- store/stored_replies.py reads them: the run's four dimensions first, each with the scope
-- that binds its limit (the host's ceiling reads as the run with a 'host' note), then every
-- bounded dimension of the run's current pool windows; a windowed pool's entry ends with
-- when its window ends (epoch microseconds). A pool's held leaves out other runs' holds past
-- expiry: they no longer count.
CREATE OR REPLACE FUNCTION budget.reply_dimensions_v2(
    run budget.engine_run_v2, pools budget.engine_pool_v2[]) RETURNS json
LANGUAGE plpgsql STABLE PARALLEL SAFE AS $$
DECLARE
    names constant text[] := ARRAY['tokens', 'cost', 'toolCalls', 'retries', 'modelCalls'];
    status text := '';
    scope text;
BEGIN
    FOR d IN 1..4 LOOP
        scope := coalesce(run.binding ->> names[d], 'run');
        status := status || CASE WHEN d = 1 THEN '' ELSE ',' END || json_build_array(
            names[d], run.lim[d], run.used[d], run.held[d],
            CASE scope WHEN 'host' THEN 'run' ELSE scope END,
            budget.scope_id_of_v2(run, scope),
            CASE scope WHEN 'host' THEN 'host' ELSE '' END)::text;
    END LOOP;
    FOR b IN 1..coalesce(cardinality(pools), 0) LOOP
        FOR d IN 1..5 LOOP
            CONTINUE WHEN pools[b].lim[d] IS NULL;
            status := status || ',' || CASE
                WHEN coalesce(pools[b].window_kind, 'none') = 'none' THEN json_build_array(
                    names[d], pools[b].lim[d], pools[b].used[d],
                    pools[b].held[d] - pools[b].other[d], pools[b].scope, pools[b].scope_id, '')
                ELSE json_build_array(
                    names[d], pools[b].lim[d], pools[b].used[d],
                    pools[b].held[d] - pools[b].other[d], pools[b].scope, pools[b].scope_id, '',
                    budget.epoch_us(budget.window_end_v1(pools[b].window_kind,
                                                         pools[b].window_start)))
                END::text;
        END LOOP;
    END LOOP;
    RETURN ('[' || status || ']')::json;
END;
$$;
