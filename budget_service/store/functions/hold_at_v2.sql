-- budget.hold_at_v2: The position of a run's hold among the batch's holds (loaded or new), or
-- NULL: a reservation id names a hold of that run only.
CREATE OR REPLACE FUNCTION budget.hold_at_v2(
    holds budget.engine_hold_v2[], reservation_id text, run integer) RETURNS integer
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
    FOR h IN 1..coalesce(cardinality(holds), 0) LOOP
        IF holds[h].reservation_id = reservation_id AND holds[h].run = run THEN
            RETURN h;
        END IF;
    END LOOP;
    RETURN NULL;
END;
$$;
