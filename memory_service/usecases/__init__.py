"""Memory use cases: the write path every write shares (idempotency, head lock, capacity, commit),
writes, compaction, read queries, ListMemory and SearchMemory with their snapshots, candidate
cache and relevance vectors, entry preparation; the settings they honour.

- `candidate_cache`: Per-process LRU of candidate indexes, keyed by (tenant, memory_id, revision),
  built once.
- `compaction`: CompactMemory: preview (any reader, even while disabled) and commit (admin, enabled,
  CAS).
- `listing`: ListMemory and SearchMemory: rank a revision's candidates, then read only what is
  returned.
- `preparation`: Entries made ready to store: the command's SR-1 pass first, then ids, hash, sizes,
  embedding.
- `queries`: Read use cases: capacity, bounded history, changes, entry versions and citations.
- `read_snapshots`: How a read gets a snapshot of one revision: the head, the clock and the cached
  index.
- `relevance`: Relevance ranking: cosine over stored vectors, fused with the lexical rank by RRF (k
  = 60).
- `relevance_vectors`: Vectors for relevance: query embeddings (cached) and each revision's matrix,
  filled once.
- `settings`: Memory service configuration: capacity budget, compaction policy, limits and read
  path.
- `write_path`: What every write shares: idempotency by request_id, the head lock, capacity check,
  commit.
- `writes`: Write use cases: one transaction each, under the memory's head lock, idempotent by
  request_id.
"""
