-- budget.scope_id_of_v2: The id of one of a run's owning scopes ('' for the run and the host).
-- End-user and key budgets are pools only (migration 0015), so they never bind a run's limit
-- nor deny a model; they are named here all the same, so no caller can name one without its id.
CREATE OR REPLACE FUNCTION budget.scope_id_of_v2(run budget.engine_run_v2, scope text)
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE scope WHEN 'workflow' THEN run.workflow_id WHEN 'agent' THEN run.agent_id
                      WHEN 'project' THEN run.project_id WHEN 'end_user' THEN run.end_user_id
                      WHEN 'api_key' THEN run.api_key_id ELSE '' END
$$;
