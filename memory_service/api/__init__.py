"""The memory gRPC boundary, the only importers of ration.memory.v1 *_pb2: the servicer, request
converters returning commands and queries, response encoders, MemoryItem messages reused across
responses, and the capability block.

- `capabilities`: The OpenWOP `memory` capability block, derived from configuration and what is
  wired.
- `item_messages`: MemoryItem messages, built once per entry version and size and reused by later
  responses.
- `requests`: Converters from memory protos to domain commands and queries (requests, fingerprints).
- `responses`: Converters from domain results to memory protos (responses and stored write replies).
- `roles`: Who may call what: the role each RPC needs, enforced by the auth interceptor.
- `servicer`: MemoryService gRPC servicer: converts requests, calls the use cases, converts
  responses.
"""
