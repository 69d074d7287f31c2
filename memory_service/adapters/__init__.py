"""The memory service's outside world: tokenizer files, the ONNX sentence embedder, the budget link
(Check on the budget service) and Prometheus domain metrics.

- `budget_link`: ListMemory's run_id clamp: the run's remaining tokens from budget_service Check
  (adapter).
- `embedder`: Offline sentence embeddings: all-MiniLM-L6-v2 (int8 ONNX) on onnxruntime, files
  hash-verified.
- `metrics`: Domain metrics of the memory service (capacity, redaction, compaction, ListMemory); no
  ids.
- `tokenizer`: Entry sizes in every ListMemory unit: tiktoken's Rust core, from rank files verified
  at start.
"""
