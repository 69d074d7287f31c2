"""The budget service's outside world other than gRPC and Postgres: Prometheus domain metrics.

- `metrics`: Budget domain metrics (DESIGN 7); counted from a Tally only after its transaction
  commits.
"""
