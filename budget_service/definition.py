"""Composition root of the budget service: builds its parts explicitly from settings."""

from __future__ import annotations

from dataclasses import replace

import grpc
from prometheus_client import CollectorRegistry

from budget_service.adapters.metrics import BudgetMetrics
from budget_service.api.capabilities import BudgetCapabilities
from budget_service.api.roles import REQUIRED_ROLES, SERVICE_NAME
from budget_service.api.servicer import BudgetServicer
from budget_service.domain.tenant_events import PollBackoff
from budget_service.store.event_hub import EVENTS_CHANNEL, EventHub
from budget_service.usecases.api_keys import ApiKeys
from budget_service.usecases.key_cache import KeyCache
from budget_service.usecases.reports import SpendReports
from budget_service.usecases.reservations import Reservations
from budget_service.usecases.runs import BudgetService
from budget_service.usecases.settings import BudgetSettings
from budget_service.usecases.stream_slots import StreamSlots, too_many_reports
from budget_service.usecases.sweeper import Sweeper
from budget_service.usecases.tenant_events import TenantStreams
from budget_service.usecases.transactions import Transactions
from ration.budget.v1 import budget_service_pb2_grpc
from servicekit.db import Database
from servicekit.definition import ServiceDefinition
from servicekit.migrations import MigrationSet
from servicekit.server import AppFactory, ServiceApp

NAME = "budget"
# 0006 and 0010 were edited after they landed on main (772a3ac, a79d752): a database that
# applied their first texts is valid, because the function files re-create what they defined
# (the edits changed decide_v1 only).
MIGRATIONS = MigrationSet(
    "budget",
    "budget_service.store.migrations",
    rewritten={
        6: frozenset({"9c31eb38aa9ea29fec35d0d26a875d0fa79bc987b4870db495a3f72e5841f008"}),
        10: frozenset({"d57c1e845209651467e8892f265d594610d3d51719d38e23f378141f6caba95d"}),
    },
    functions_package="budget_service.store.functions",
)
# An idle tenant stream reads again after this, then doubling up to its configured longest.
TENANT_STREAM_FIRST_POLL_SECONDS = 0.02


def factory(settings: BudgetSettings) -> AppFactory:
    def build(database: Database, registry: CollectorRegistry) -> ServiceApp:
        tx = Transactions(database, settings, BudgetMetrics(registry, settings.metric_labels))
        hub = EventHub(
            database.url,
            EVENTS_CHANNEL,
            database,
            wakeup=settings.run_event_wakeup,
            poll_seconds=settings.run_event_poll_seconds,
        )
        # Reports read on a small pool of their own (usecases/reports.py).
        report_db = replace(
            database.settings,
            pool_min=0,
            pool_max=settings.report_pool_max,
            statement_timeout_ms=settings.report_statement_timeout_ms,
        )
        reports = SpendReports(
            Database(database.url, report_db),
            StreamSlots(settings.max_reports_per_tenant, too_many_reports),
            settings.report_slots_per_tenant,
            settings.report_share,
        )

        async def close() -> None:
            await hub.close()
            await reports.close()

        servicer = BudgetServicer(
            BudgetCapabilities.from_settings(settings),
            BudgetService(tx, hub, StreamSlots(settings.max_streams_per_tenant)),
            Reservations(tx),
            settings.max_hold_ttl_seconds,
            reports,
            TenantStreams(
                database,
                StreamSlots(settings.max_tenant_streams_per_tenant),
                PollBackoff(TENANT_STREAM_FIRST_POLL_SECONDS, settings.tenant_stream_poll_seconds),
            ),
            ApiKeys(tx),
        )
        issued = KeyCache(database, settings.api_key_refresh_seconds)

        def register(server: grpc.aio.Server) -> None:
            budget_service_pb2_grpc.add_BudgetServiceServicer_to_server(servicer, server)  # type: ignore[no-untyped-call]

        return ServiceApp(
            name=NAME,
            service_name=SERVICE_NAME,
            error_domain="ration.budget.v1",
            migrations=[MIGRATIONS],
            register=register,
            background=[hub.run, Sweeper(tx).run, issued.run],
            close=close,
            roles=REQUIRED_ROLES,
            issued_keys=issued,
        )

    return build


DEFINITION = ServiceDefinition(
    name=NAME,
    service_name=SERVICE_NAME,
    migrations=(MIGRATIONS,),
    settings=BudgetSettings.from_env,
    factory=factory,
)
