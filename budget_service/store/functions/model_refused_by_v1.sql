-- budget.model_refused_by_v1: Which scope's model list refuses a model, if any.
-- Current definition, applied by the repeatable step of servicekit/migrations.py whenever
-- this file changes (moved here from migration 0006).
--
-- The scope whose model list refuses `model` (NULL: allowed): any deny list that matches wins,
-- narrowest scope first; then every declared allow list must match (an empty one allows
-- nothing). Exact, case-sensitive, `*` globs (budget.glob_matches).
CREATE OR REPLACE FUNCTION budget.model_refused_by_v1(lists jsonb, model text) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT coalesce(
        (SELECT e ->> 'scope' FROM jsonb_array_elements(lists) e
         WHERE EXISTS (SELECT 1 FROM jsonb_array_elements_text(e -> 'deny') g
                       WHERE budget.glob_matches(g, model))
         ORDER BY budget.scope_rank_v1(e ->> 'scope') LIMIT 1),
        (SELECT e ->> 'scope' FROM jsonb_array_elements(lists) e
         WHERE jsonb_typeof(e -> 'allow') = 'array'
           AND NOT EXISTS (SELECT 1 FROM jsonb_array_elements_text(e -> 'allow') g
                           WHERE budget.glob_matches(g, model))
         ORDER BY budget.scope_rank_v1(e ->> 'scope') LIMIT 1))
$$;
