-- The read path's one-memory head function (migration 0003, re-created by 0005): the reads
-- call memory.heads_as_tenant for any number of memories, and nothing calls this one.
DROP FUNCTION IF EXISTS memory.head_as_tenant(text, text);
