"""Outside development mode the services refuse a database role that row-level security does
not apply to (superuser, BYPASSRLS, the tables' owner) unless the operator overrides it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.support import dbroles
from tests.support.procs import BIN, Proc, clean_env
from tests.support.token_files import write_token_file

pytestmark = pytest.mark.system

OVERRIDE = "RATION_ALLOW_PRIVILEGED_DB_ROLE"


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    return write_token_file(tmp_path / "tokens.json", ("alpha-token", "alpha", ["writer"]))


def served_as(url: str, token_file: Path, **extra: str) -> dict[str, str]:
    """`ration budget serve` with tokens (not development mode), connected with `url` as is."""
    env = clean_env(RATION_TOKEN_FILE=str(token_file), RATION_LOG_LEVEL="ERROR", **extra)
    env.pop("RATION_MIGRATE_DATABASE_URL", None)
    env["RATION_DATABASE_URL"] = url
    return env


@pytest.mark.parametrize("who", ["superuser", "owner"])
def test_a_privileged_database_role_is_refused_with_exit_2_naming_the_override(
    who: str, database_url: str, db_roles: dbroles.Roles, token_file: Path
) -> None:
    url = database_url if who == "superuser" else db_roles.owner_url(database_url)
    done = subprocess.run(
        [str(BIN / "ration"), "budget", "serve"],
        env=served_as(url, token_file),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr[-2000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("ration: configuration error:"), last
    assert OVERRIDE in last
    assert ("is a superuser" if who == "superuser" else "owns the tables") in last


def test_the_override_lets_a_superuser_role_serve(database_url: str, token_file: Path) -> None:
    proc = Proc.start(
        [str(BIN / "ration"), "budget", "serve"],
        served_as(database_url, token_file, **{OVERRIDE: "true"}),
    )
    try:
        proc.wait_for("ready:", timeout=120)
    finally:
        assert proc.stop() == 0


def test_the_application_role_serves_and_only_checks_the_schema(
    database_url: str, db_roles: dbroles.Roles, token_file: Path
) -> None:
    # RATION_MIGRATE_ON_START stays on (the default), with no owner URL: nothing is pending,
    # so the application role, which may create nothing, only reads the migrations ledger.
    proc = Proc.start(
        [str(BIN / "ration"), "budget", "serve"],
        served_as(db_roles.app_url(database_url), token_file),
    )
    try:
        proc.wait_for("ready:", timeout=120)
    finally:
        assert proc.stop() == 0
