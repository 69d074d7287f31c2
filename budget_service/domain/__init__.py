"""The budget domain, opened first: dimensions and policies, run and hold state, typed events,
refusals and input rules, as pure functions over dataclasses (standard library and
servicekit.errors only). The database arbitrates every balance change: the engine's functions in
store/functions/ (decide_v2.sql, the engine decide_batch_v2.sql and its steps, and
close_run_v1.sql and the other lifecycle functions); its Python reference model is in
tests/support/.

- `alerts`: Webhook alerts of `ration notify`: which events, the body a receiver gets, its
  signature.
- `commands`: Use-case inputs and outputs of the budget service, in domain types (no protobuf).
- `events`: Budget events: typed dataclasses and their exact OpenWOP v1 JSON payloads.
- `fingerprints`: Canonical encodings a budget call is compared by: the fingerprint of an OpenRun.
- `input_rules`: Input validation of the budget domain: policies, scope budgets, amounts, ids and
  paging.
- `policy`: Budget policy: dimensions, validation, scope resolution, window kinds, model allow/deny.
- `records`: Stored budget state as domain records: runs, holds, pools and the changes a call
  writes.
- `refusals`: Budget refusals: the guards that refuse a call and the DomainErrors they raise (DESIGN
  11).
- `run_state`: Budget state as plain data: run lifecycle, holds, balances, breaches and contention.
- `spend`: Spend reports: the query (window, grouping, filter), its input rules and the rows it
  sums.
- `tenant_events`: The tenant event stream's rules: positions in a tenant's event order, cursors,
  the filter.

Naming: a Reservation is the hold of DESIGN/RFC 0084; SQL table budget.holds, metrics
ration_budget_holds_*; Python says reservation, like the proto.
"""
