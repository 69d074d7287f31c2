"""The budget gRPC boundary, the only importers of ration.budget.v1 *_pb2: the servicer (convert,
call a use case, convert back), request converters returning validated commands, response
encoders and the capability blocks.

- `capabilities`: The OpenWOP `budget` and `limits` capability blocks, derived from configuration
  only.
- `requests`: Protobuf requests to budget commands, validated: every bad field is one violation.
- `responses`: Budget results to protobuf responses (typed events, balances, runs, holds, scope
  budgets).
- `roles`: Who may call what: the role each RPC needs, enforced by the auth interceptor.
- `servicer`: BudgetService gRPC servicer: converts requests, calls the use cases, converts
  responses.
- `stored_responses`: Reserve, Consume and Release results to responses, straight from their
  stored reply.
"""
