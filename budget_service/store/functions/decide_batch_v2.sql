-- budget.decide_batch_v2: The engine as the waiting entries of the releases before call it
-- (budget.decide_v2 and decide_v1, kept for a rolling deploy; DESIGN 6): every run's lock is
-- waited for (or, p_read_only, nothing is locked), as they always did. The engine itself is
-- budget.decide_batch_v3; a later migration drops this with them, once no replica calls them.
CREATE OR REPLACE FUNCTION budget.decide_batch_v2(
    batch_tenant text, p_host_advisory boolean, p_read_only boolean,
    p_items budget.decide_item_v2[],
    OUT outcomes text[], OUT responses bytea[], OUT refusals jsonb[], OUT tallies jsonb[])
LANGUAGE plpgsql AS $$
BEGIN
    SELECT d.outcomes, d.responses, d.refusals, d.tallies
    INTO outcomes, responses, refusals, tallies
    FROM budget.decide_batch_v3(batch_tenant, p_host_advisory,
                                CASE WHEN p_read_only THEN 'read' ELSE 'wait' END, p_items) d;
END;
$$;
