-- budget.ledger_is_append_only: Trigger: the ledger is append-only, an UPDATE or DELETE of it is refused.
-- Current definition, applied by the repeatable step of servicekit/migrations.py whenever
-- this file changes (moved here from migration 0002).
CREATE OR REPLACE FUNCTION budget.ledger_is_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'budget.ledger is append-only';
END;
$$;
