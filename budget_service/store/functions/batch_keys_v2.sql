-- budget.batch_keys_v2: The keys a batch looks up: its runs (each once), and the run and id of
-- each hold its Consume and Release items name. Every lookup of the engine is driven by
-- these, never by a scan of the tenant.
CREATE OR REPLACE FUNCTION budget.batch_keys_v2(
    items budget.decide_item_v2[], OUT run_ids text[], OUT named_runs text[],
    OUT named_ids text[])
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
    run_ids := '{}'; named_runs := '{}'; named_ids := '{}';
    FOR i IN 1..coalesce(cardinality(items), 0) LOOP
        IF NOT items[i].run_id = ANY(run_ids) THEN
            run_ids := run_ids || items[i].run_id;
        END IF;
        IF items[i].kind IN ('consume', 'release') AND items[i].reservation_id <> '' THEN
            named_runs := named_runs || items[i].run_id;
            named_ids := named_ids || items[i].reservation_id;
        END IF;
    END LOOP;
END;
$$;
