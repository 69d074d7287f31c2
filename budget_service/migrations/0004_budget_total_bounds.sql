-- Placeholder on the rls branch only: this number belongs to the budgetauth branch's migration
-- of the same name, which replaces this file when both are merged (0005 follows it).
SELECT 1;
