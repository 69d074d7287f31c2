"""What the tests share, one concept per module; tests/conftest.py keeps only the fixtures.

- `postgres`: server URLs, admin statements, cloned databases, a restartable embedded server.
- `dbroles`: the session's owner and application roles (the operator's SQL, unique names).
- `servers`: real servers built from ration_server.registry, in-process or on their own thread.
- `procs`: `ration` subprocesses as users start them, and their environment.
- `health`, `replicas`: health polling; calls that fail over between replicas.
- `errors`: a failed call's status (ErrorInfo + details), decoded by ration_client.
- `budget`, `memory`: typed clients over the stubs, request builders, row probes.
- `scenarios`: budget scenarios that emit every event type in hard and advisory mode.
- `manifests`, `tokens`: the reference manifest bytes and token counts, computed independently.
- `fingerprints`, `audits`: did a call write anything; the invariants read back after a load.
- `clock`: a monotonic clock the test moves by hand.
- `fuzz`: hostile requests built from the proto descriptors and the verdict on each answer.
- `releases`: the releases of CHANGELOG.md and their commits' files, read from git history.
- `oracle`: the reference model of budget decisions (every rule and row, in memory) that the
  database's decide_v1 is compared with.
"""
