"""The budget service's outside world other than gRPC and Postgres: Prometheus domain metrics,
and the webhooks `ration notify` POSTs to.

- `metrics`: Budget domain metrics (DESIGN 7); counted from a Tally only after its transaction
  commits.
- `webhooks`: HTTP POSTs of webhook alerts: aiohttp on the event loop, a total deadline each.
- `notify_metrics`: `ration notify`'s lag, deliveries, failures and retries per webhook.
"""
