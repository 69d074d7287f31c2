"""Budget service configuration: host enforcement mode, ceilings and hold lifetimes."""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation

from budget_service.store.report_slots import MAX_SLOTS
from servicekit.batching import BatchSettings
from servicekit.labels import MetricLabels
from servicekit.settings import DatabaseSettings, Env, ServerSettings, SettingsError

NANOS_PER_USD = 1_000_000_000
# A tenant's reports' share of one core on each process, in percent. At 25 % (its first
# default) one tenant's report loop on both workers of the 2-core bench made 100-157 pages a
# second and another tenant's Reserve+Consume p50 rose 1.3-1.6x (bench noisy.reports); at 5 %
# it made 7-29 and the other's p50 stayed at 0.9-1.1x. A page reads its own groups (a few ms),
# so 5 % still serves about ten pages a second per process to one tenant; an operator with
# report-heavy tenants raises it.
REPORT_SHARE_PERCENT = 5


def usd_to_nanos(name: str, text: str) -> int:
    try:
        value = Decimal(text)
    except InvalidOperation:
        raise SettingsError(f"{name}={text!r} is invalid: expected a USD amount") from None
    nanos = value * NANOS_PER_USD
    if value < 0 or nanos != nanos.to_integral_value() or nanos >= 2**63:
        raise SettingsError(f"{name}={text!r} is invalid: a non-negative USD amount in nanos")
    return int(nanos)


@dataclass(frozen=True)
class BudgetSettings:
    server: ServerSettings
    database: DatabaseSettings
    # "hard" stops runs; "advisory" emits every event but never refuses or fails a run.
    enforce: str
    # Host ceilings (OpenWOP limits.maxBudgetTokens / maxBudgetCostUsd); None = no ceiling.
    max_budget_tokens: int | None
    max_budget_cost_nanos: int | None
    default_hold_ttl_seconds: int
    max_hold_ttl_seconds: int
    sweep_interval_seconds: float
    # How often the sweeper refreshes the gauges (open holds, pool balances), which read every
    # tenant's open holds and pools: about once per scrape, not on every sweep.
    gauge_interval_seconds: float
    idempotency_retention_hours: int
    metric_labels: MetricLabels
    # Concurrent WatchRunEvents streams one tenant may hold open on one server process.
    max_streams_per_tenant: int = 100
    # Concurrent WatchTenantEvents streams one tenant may hold open on one server process, and
    # the longest wait of an idle one between two reads of the events table.
    max_tenant_streams_per_tenant: int = 10
    tenant_stream_poll_seconds: float = 0.5
    # How WatchRunEvents learns of new events: "notify" (LISTEN/NOTIFY, a session connection),
    # "poll" (reads the streamed runs every run_event_poll_seconds), or "auto": poll on Citus,
    # where a NOTIFY sent on a worker never reaches the coordinator's listeners, else notify.
    run_event_wakeup: str = "auto"
    run_event_poll_seconds: float = 0.1
    # ReportSpend: its own pool of connections (never the hot path's), with its statement
    # timeout, at most max_reports_per_tenant reports of one tenant at once per server
    # process, and at most report_slots_per_tenant report statements of one tenant at once
    # on the database, across replicas (store/report_slots.py).
    report_pool_max: int = 4
    report_statement_timeout_ms: int = 5000
    max_reports_per_tenant: int = 2
    report_slots_per_tenant: int = 1
    # The share of one core's time a tenant's reports may take on each process.
    report_share: float = REPORT_SHARE_PERCENT / 100
    # Group commit of Reserve/Consume/Release (and of Checks): requests per statement, and
    # statements of one tenant at the database at once from one process.
    batch: BatchSettings = field(default_factory=BatchSettings)
    # How often each process reloads the live issued API keys (revocation, rotation overlaps):
    # a change reaches every replica within twice this plus one read (README, "API keys").
    api_key_refresh_seconds: float = 1.0

    @classmethod
    def from_env(cls, env: Env | None = None) -> BudgetSettings:
        env = env or Env()
        cost_text = env.optional_text("RATION_MAX_BUDGET_COST_USD")
        default_ttl = env.integer("RATION_HOLD_TTL_SECONDS", 300, minimum=1)
        max_ttl = env.integer("RATION_MAX_HOLD_TTL_SECONDS", 3600, minimum=1)
        if default_ttl > max_ttl:
            raise SettingsError(
                f"RATION_HOLD_TTL_SECONDS={default_ttl} is invalid: must be <= "
                f"RATION_MAX_HOLD_TTL_SECONDS ({max_ttl})"
            )
        return cls(
            server=ServerSettings.from_env(env, "budget", 50051, 9464),
            database=DatabaseSettings.from_env(env),
            enforce=env.choice("RATION_ENFORCE", "hard", ("hard", "advisory")),
            max_budget_tokens=env.optional_integer("RATION_MAX_BUDGET_TOKENS", minimum=1),
            max_budget_cost_nanos=(
                usd_to_nanos("RATION_MAX_BUDGET_COST_USD", cost_text) if cost_text else None
            ),
            default_hold_ttl_seconds=default_ttl,
            max_hold_ttl_seconds=max_ttl,
            sweep_interval_seconds=env.integer("RATION_SWEEP_INTERVAL_MS", 1000, minimum=10) / 1000,
            gauge_interval_seconds=env.integer("RATION_GAUGE_INTERVAL_MS", 15000, minimum=10)
            / 1000,
            idempotency_retention_hours=env.integer(
                "RATION_IDEMPOTENCY_RETENTION_HOURS", 24, minimum=24
            ),
            metric_labels=MetricLabels.from_env(env),
            max_streams_per_tenant=env.integer(
                "RATION_BUDGET_MAX_STREAMS_PER_TENANT", 100, minimum=1
            ),
            max_tenant_streams_per_tenant=env.integer(
                "RATION_BUDGET_MAX_TENANT_STREAMS_PER_TENANT", 10, minimum=1
            ),
            tenant_stream_poll_seconds=env.integer(
                "RATION_BUDGET_TENANT_STREAM_POLL_MS", 500, minimum=10
            )
            / 1000,
            run_event_wakeup=env.choice(
                "RATION_BUDGET_RUN_EVENT_WAKEUP", "auto", ("auto", "notify", "poll")
            ),
            run_event_poll_seconds=env.integer("RATION_BUDGET_RUN_EVENT_POLL_MS", 100, minimum=10)
            / 1000,
            report_pool_max=env.integer("RATION_BUDGET_REPORT_POOL_MAX", 4, minimum=1),
            report_statement_timeout_ms=env.integer(
                "RATION_BUDGET_REPORT_STATEMENT_TIMEOUT_MS", 5000, minimum=1
            ),
            max_reports_per_tenant=env.integer(
                "RATION_BUDGET_MAX_REPORTS_PER_TENANT", 2, minimum=1
            ),
            report_slots_per_tenant=_report_slots(env),
            report_share=_report_share_percent(env) / 100,
            batch=BatchSettings(
                max_items=env.integer("RATION_BUDGET_BATCH_MAX", 64, minimum=1),
                inflight=env.integer("RATION_BUDGET_BATCH_INFLIGHT", 1, minimum=1),
                paced=env.flag("RATION_BUDGET_FAIR_PACING", True),
                pacing_floor=env.integer("RATION_BUDGET_PACING_FLOOR", 200, minimum=1),
            ),
            api_key_refresh_seconds=_api_key_refresh_ms(env) / 1000,
        )


MAX_API_KEY_REFRESH_MS = 2000  # keeps the documented revocation bound (5 s) true


def _api_key_refresh_ms(env: Env) -> int:
    name = "RATION_BUDGET_API_KEY_REFRESH_MS"
    value = env.integer(name, 1000, minimum=50)
    if value > MAX_API_KEY_REFRESH_MS:
        raise SettingsError(f"{name}={value} is invalid: must be <= {MAX_API_KEY_REFRESH_MS}")
    return value


def _report_share_percent(env: Env) -> int:
    name = "RATION_BUDGET_REPORT_SHARE_PERCENT"
    value = env.integer(name, REPORT_SHARE_PERCENT, minimum=1)
    if value > 100:  # a share of one core's time
        raise SettingsError(f"{name}={value} is invalid: must be <= 100")
    return value


def _report_slots(env: Env) -> int:
    name = "RATION_BUDGET_REPORT_SLOTS_PER_TENANT"
    value = env.integer(name, 1, minimum=1)
    if value > MAX_SLOTS:  # the slots' lock keys are one class of SLOT_CLASS + slot
        raise SettingsError(f"{name}={value} is invalid: must be <= {MAX_SLOTS}")
    return value
