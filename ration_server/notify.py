"""`ration notify`: the webhook alert process, built from RATION_NOTIFY_* and run until stopped."""

from __future__ import annotations

import asyncpg

from budget_service.definition import MIGRATIONS
from budget_service.usecases.notifier import Notifier
from budget_service.usecases.notify_settings import NotifySettings
from servicekit.db import Database
from servicekit.dbrole import check_role
from servicekit.logs import say
from servicekit.migrations import pending
from servicekit.settings import Env, SettingsError
from servicekit.shutdown import Stop


async def _check_database(url: str, settings: NotifySettings) -> None:
    """The role must be one that row-level security applies to, and the schema current."""
    conn = await asyncpg.connect(url, timeout=10)
    try:
        allowed = settings.database.allow_privileged_role
        await check_role(conn, ["budget"], dev_mode=False, allowed=allowed)
        missing = await pending(conn, [MIGRATIONS])
    finally:
        await conn.close()
    if missing:
        raise SettingsError(f"migrations pending (run `ration migrate`): {', '.join(missing)}")


async def run_notify(env: Env, stop: Stop) -> int:
    settings = NotifySettings.from_env(env)
    url = settings.database.url
    if not url:
        raise SettingsError("RATION_DATABASE_URL is required: ration notify follows a database")
    await _check_database(url, settings)
    database = Database(url, settings.database)
    await database.connect()
    try:
        notifier = Notifier(database, settings)
        tenants = {w.tenant for w in settings.webhooks}
        say(f"notify: {len(settings.webhooks)} webhooks of {len(tenants)} tenants (Ctrl-C to stop)")
        await stop.race(notifier.run())
    finally:
        await database.close()
    return 0
