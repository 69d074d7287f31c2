-- budget.state_refusal_v2: Why a run's own state refuses a Reserve or Check (NULL: ACTIVE).
--
-- Checked first, in advisory mode too (DESIGN 3.4, 3.6): FAILED is BUDGET_EXHAUSTED with the
-- breach that stopped it, INTERRUPTED is RUN_INTERRUPTED (until a ResumeRun approval), CLOSED
-- is RUN_CLOSED. Consume is never refused for the run's state. The oracle's twin:
-- tests/support/oracle.py `state_refusal`.
CREATE OR REPLACE FUNCTION budget.state_refusal_v2(run budget.engine_run_v2) RETURNS jsonb
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN run.state = 'active' THEN NULL ELSE
        jsonb_build_object(
            'reason', CASE run.state WHEN 'failed' THEN 'BUDGET_EXHAUSTED'
                                     WHEN 'interrupted' THEN 'RUN_INTERRUPTED'
                                     ELSE 'RUN_CLOSED' END,
            'state', run.state, 'scope', 'run')
        || CASE WHEN run.state = 'failed' AND run.stop_dim IS NOT NULL THEN jsonb_build_object(
               'dimension', run.stop_dim, 'limit', run.stop_lim, 'consumed', run.stop_used,
               'observed', run.stop_obs, 'breach_scope', run.stop_scope,
               'breach_scope_id', run.stop_scope_id)
           ELSE '{}'::jsonb END
    END
$$;
