"""Memory storage on PostgreSQL: every SQL string (literal, $n parameters, filtered on tenant_id),
row <-> record mapping, the tenant-scoped RLS role every transaction runs as, and the
forward-only numbered migrations.

- `candidate_reads`: SQL of ListMemory and SearchMemory: the head and clock, candidate rows,
  vectors, content.
- `migrations/`: forward-only numbered SQL migrations, applied in order: 0001_schema,
  0002_revisions, 0003_search_and_rls, 0004_heads_batch, 0005_forced_rls, 0006_citus_routing.
- `reads`: SQL of the read path: heads, revision rows, changes, entry versions and past manifests.
- `writes`: SQL of the write path: the head lock, what a write reads at the head, and writing a
  revision.
"""
