"""The memory domain, opened first: ids, the canonical manifest and its size, the capacity
contract, compaction planning, selection under a token budget, SR-1 redaction, commands,
records, next-revision planning and input rules, as pure functions over dataclasses (standard
library and servicekit only; see the layout README for the known exceptions). The
redaction of one text and its detector table are in servicekit (`redaction`, `secret_shapes`),
which the budget service uses too.

- `candidate_index`: The candidate index of one revision: what ListMemory and SearchMemory rank,
  without content.
- `capacity`: The capacity contract: budget, usage, which operations may grow what, and the refusal.
- `change_pages`: Change-page tokens: the (revision, entry_id) cursor a changes page hands back,
  opaque.
- `commands`: What callers ask of the memory service: write commands and read queries,
  transport-free.
- `compaction`: Compaction: which tombstones may leave the manifest, in what order, and what it
  reclaims.
- `ids`: Identifiers of the memory service: entry and version ids, and memory_ref validation.
- `manifest`: Canonical content of a revision (RFC 8785 JSON) and its exact size, computed
  incrementally.
- `read_input_rules`: Input rules of the reads (ListMemory, SearchMemory, capacity, history,
  changes, citations); a malformed memory_ref reads as an absent memory.
- `records`: Plain records of stored memory: heads, items, versions, revisions, capacity, read
  results.
- `refusals`: The memory service's documented refusals (DESIGN 11), as DomainErrors with structured
  fields.
- `revisions`: The next revision of each write, fully prepared before anything is written (pure).
- `selection`: ListMemory's injection budget: rank the candidates, then take the prefix that fits
  (the
- `token_counters`: The units a token_budget is denominated in; the tokenizer adapter counts in
  each.
- `write_input_rules`: Input rules of the write commands: each violation names its field and never
  echoes a value.
- `write_redaction`: SR-1 over a whole write command: one pass over every caller text, and its
  fingerprint.
"""
