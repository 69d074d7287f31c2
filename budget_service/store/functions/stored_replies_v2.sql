-- budget.stored_replies_v2: Items whose request id the tenant's request log already holds: the
-- same request (same fingerprint) replays its stored reply, another one is REQUEST_ID_REUSED
-- (outcome 'reused'). Read once the runs are locked, so a twin on the same run that
-- committed while this batch waited for the lock replays instead of applying twice. Each
-- request id is one primary-key probe, never a scan of the tenant's log. An item answered
-- already (outcomes[i] set: 'busy', its run locked elsewhere) is neither looked up nor changed.
CREATE OR REPLACE FUNCTION budget.stored_replies_v2(
    tenant text, items budget.decide_item_v2[], INOUT outcomes text[],
    INOUT responses bytea[])
LANGUAGE plpgsql STABLE AS $$
#variable_conflict use_variable
DECLARE
    answered constant text[] := outcomes;
    rec record;
BEGIN
    FOR rec IN
        SELECT l.request_id, l.fingerprint, l.response
        FROM generate_subscripts(items, 1) AS q(i)
        CROSS JOIN LATERAL (
            SELECT g.request_id, g.fingerprint, g.response FROM budget.request_log g
            WHERE g.tenant_id = tenant AND g.request_id = items[q.i].request_id LIMIT 1) l
        WHERE answered[q.i] IS NULL
    LOOP
        FOR i IN 1..cardinality(items) LOOP
            CONTINUE WHEN items[i].request_id <> rec.request_id OR answered[i] IS NOT NULL;
            outcomes[i] := CASE WHEN rec.fingerprint = items[i].fingerprint THEN 'replay'
                                ELSE 'reused' END;
            responses[i] := CASE WHEN outcomes[i] = 'replay' THEN rec.response END;
        END LOOP;
    END LOOP;
END;
$$;
