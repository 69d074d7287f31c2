-- Functions nothing calls any more: no Python, no other function, no trigger. The
-- one-statement Reserve, Consume and Release of migration 0003 (re-created by 0004, entered by
-- tenant in 0005) and their helpers were replaced by budget.decide_v1 (migration 0006); no
-- released replica calls them (0.1.0 calls decide_v1 only). Callers first.
DROP FUNCTION IF EXISTS budget.reserve_as_tenant(
    text, text, bytea, text, text, text, bigint[], boolean, integer, boolean);
DROP FUNCTION IF EXISTS budget.consume_as_tenant(text, text, bytea, text, text, text, bigint[]);
DROP FUNCTION IF EXISTS budget.release_as_tenant(text, text, bytea, text, text);
DROP FUNCTION IF EXISTS budget.reserve(
    text, text, bytea, text, text, text, bigint[], boolean, integer, boolean);
DROP FUNCTION IF EXISTS budget.consume(text, text, bytea, text, text, text, bigint[]);
DROP FUNCTION IF EXISTS budget.release(text, text, bytea, text, text);
DROP FUNCTION IF EXISTS budget.hold_reply(budget.holds);
DROP FUNCTION IF EXISTS budget.run_statuses(budget.runs);
DROP FUNCTION IF EXISTS budget.run_status(budget.runs, text, bigint, bigint, bigint);
DROP FUNCTION IF EXISTS budget.binding_scope(budget.runs, text);
DROP FUNCTION IF EXISTS budget.model_allowed(jsonb, text);
