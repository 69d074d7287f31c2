-- The lifecycle calls (budget.lock_run_v1 for CloseRun, ResumeRun and the sweeper) now lock
-- pool rows, open pool windows and end holds with the engine's own steps (budget.lock_pool_rows_v2,
-- pool_windows_v2, batch_holds_v2, expire_holds_v2, hold_end_v2, write_balances_v2,
-- write_records_v2): each rule is written once. Their former copies go; no released replica
-- calls them (0.1.0 calls decide_v1 only). The function files re-create what changed after this.
DROP FUNCTION IF EXISTS budget.end_hold_v1(text, text, text, text, text, text);
DROP FUNCTION IF EXISTS budget.lock_pool_rows_v1(text, text[], text[], timestamptz[]);
DROP FUNCTION IF EXISTS budget.open_pool_windows_v1(text, text[], text[], timestamptz[]);
-- expire_holds_v2 takes the runs that expire theirs (`deciding`): a new signature.
DROP FUNCTION IF EXISTS budget.expire_holds_v2(
    budget.engine_run_v2[], budget.engine_pool_v2[], budget.engine_hold_v2[], timestamptz);
-- lock_run_v1 also returns the holds it released: a new result type, which CREATE OR REPLACE
-- cannot give the old function (its file re-creates it).
DROP FUNCTION IF EXISTS budget.lock_run_v1(text, text, text, boolean, boolean);
