-- budget.reserve_fit_v2: Whether an amount fits one dimension of one balance (a run or a pool).
--
-- DESIGN 3.3: 'breach' when consumed + amount > limit (it cannot fit even if every hold is
-- released), 'contention' when consumed + held + amount > limit (it would fit once holds end:
-- retryable), NULL when it fits or the dimension is unbounded (NULL limit). UP_TO on tokens or
-- cost (partial) asks for at least one unit: only a spent balance breaches, only a balance
-- fully taken by holds is contention. Exact in numeric: bigint sums never overflow here.
-- The oracle's twin is tests/support/oracle.py `_fit` (tests/integration/test_budget_rules.py).
CREATE OR REPLACE FUNCTION budget.reserve_fit_v2(
    lim bigint, used bigint, held bigint, amount bigint, partial boolean) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE
        WHEN lim IS NULL THEN NULL
        WHEN used::numeric + CASE WHEN partial THEN 1 ELSE amount END > lim THEN 'breach'
        WHEN used::numeric + held + CASE WHEN partial THEN 1 ELSE amount END > lim
            THEN 'contention'
    END
$$;
