-- budget.scope_id_of_v2: The id of one of a run's owning scopes ('' for the run and the host).
CREATE OR REPLACE FUNCTION budget.scope_id_of_v2(run budget.engine_run_v2, scope text)
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE scope WHEN 'workflow' THEN run.workflow_id WHEN 'agent' THEN run.agent_id
                      WHEN 'project' THEN run.project_id ELSE '' END
$$;
