-- ReportSpend pages in O(page) (issue 24; store/reports.py): a page of spend by an owner or
-- model walks that column's keys in byte order, one probe per key, and sums each key's rows of
-- the window through the column's index here, instead of summing every rollup row of the
-- window on every page; a DAY or HOUR page filtered by one of them walks its hours the same
-- way (unfiltered, they walk the primary key, which leads with (tenant_id, hour)).
--
-- COLLATE "C": report keys ascend in byte order, which the walk reads straight off the index.
-- tenant_id leads (the distribution column on Citus). Each index is partial on its column
-- IS NOT NULL, true of every row (the columns are NOT NULL) but proved by the planner only
-- from a condition a statement puts on that column: so only the statements of that column
-- can use it. A generic plan made on nearly empty tables, where every index costs alike,
-- cannot take another column's index (read by tenant alone) for a statement that names none.
--
-- The sums are not in the indexes: a Consume that adds to an existing rollup row changes no
-- indexed column and stays a HOT update; one that starts a row (a group's first consume in
-- its hour and bucket) writes six more index entries. Built in the migration's transaction:
-- Consumes (the rollup trigger) wait while they build (CHANGELOG).
CREATE INDEX spend_rollups_by_project ON budget.spend_rollups
    (tenant_id, project_id COLLATE "C", hour) WHERE project_id IS NOT NULL;
CREATE INDEX spend_rollups_by_workflow ON budget.spend_rollups
    (tenant_id, workflow_id COLLATE "C", hour) WHERE workflow_id IS NOT NULL;
CREATE INDEX spend_rollups_by_agent ON budget.spend_rollups
    (tenant_id, agent_id COLLATE "C", hour) WHERE agent_id IS NOT NULL;
CREATE INDEX spend_rollups_by_model ON budget.spend_rollups
    (tenant_id, model COLLATE "C", hour) WHERE model IS NOT NULL;
CREATE INDEX spend_rollups_by_end_user ON budget.spend_rollups
    (tenant_id, end_user_id COLLATE "C", hour) WHERE end_user_id IS NOT NULL;
CREATE INDEX spend_rollups_by_api_key ON budget.spend_rollups
    (tenant_id, api_key_id COLLATE "C", hour) WHERE api_key_id IS NOT NULL;
