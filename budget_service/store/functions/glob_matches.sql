-- budget.glob_matches: Whether a model-list glob matches a model name.
-- Current definition, applied by the repeatable step of servicekit/migrations.py whenever
-- this file changes (moved here from migration 0003).
--
-- policy.glob_matches: exact and case-sensitive, `*` matches any run (LIKE with `*` as `%`).
CREATE OR REPLACE FUNCTION budget.glob_matches(pattern text, model text) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT model LIKE replace(replace(replace(replace(
        pattern, '\', '\\'), '%', '\%'), '_', '\_'), '*', '%')
$$;
