-- budget.flag_mask_v1: The bit mask of once-per-dimension flag names.
-- Current definition, applied by the repeatable step of servicekit/migrations.py whenever
-- this file changes (moved here from migration 0010).
CREATE OR REPLACE FUNCTION budget.flag_mask_v1(flags text[]) RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN 'tokens' = ANY(flags) THEN 1 ELSE 0 END
         | CASE WHEN 'cost' = ANY(flags) THEN 2 ELSE 0 END
         | CASE WHEN 'toolCalls' = ANY(flags) THEN 4 ELSE 0 END
         | CASE WHEN 'retries' = ANY(flags) THEN 8 ELSE 0 END
         | CASE WHEN 'modelCalls' = ANY(flags) THEN 16 ELSE 0 END
$$;
