-- budget.threshold_reached_v2: Whether consumption has reached a threshold percent of a limit.
--
-- consumed >= percent % of limit, in exact integers (no rounding at the boundary); nothing
-- consumed never crosses (a 0 % threshold waits for the first unit). budget.threshold.crossed
-- is emitted once per dimension when this first holds (DESIGN 3.5). The oracle's twin is
-- tests/support/oracle.py `threshold_reached`.
CREATE OR REPLACE FUNCTION budget.threshold_reached_v2(
    consumed bigint, lim bigint, percent integer) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT consumed > 0 AND consumed::numeric * 100 >= lim::numeric * percent
$$;
