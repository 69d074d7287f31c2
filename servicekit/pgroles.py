"""The operator's SQL for ration's two Postgres roles: the owner that migrates, the application
role the services connect as (README, "Postgres roles"). The test harness and the benchmark
create their roles with these same statements."""

from __future__ import annotations

from servicekit.db import quote_literal


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def role_statements(owner: str, app: str, owner_password: str, app_password: str) -> list[str]:
    """Run once per cluster by a superuser (or a CREATEROLE role). The application role is an
    ordinary login role: no superuser, no BYPASSRLS, and it owns nothing."""
    return [
        f"CREATE ROLE {_ident(owner)} LOGIN PASSWORD {quote_literal(owner_password)}",
        f"CREATE ROLE {_ident(app)} LOGIN NOSUPERUSER NOBYPASSRLS"
        f" PASSWORD {quote_literal(app_password)}",
    ]


def database_statement(database: str, owner: str) -> str:
    """The owner owns the database, so it may create the schemas (and, from PostgreSQL 15,
    the migrations ledger in schema public)."""
    return f"CREATE DATABASE {_ident(database)} OWNER {_ident(owner)}"


def database_statements(owner: str, app: str) -> list[str]:
    """Run in the database before the first `ration migrate` (as a superuser or the owner):
    what the owner creates from then on (schemas, tables, sequences, functions) is usable by
    the application role. Migrations therefore never name the application role, and it gets
    no DDL right, and no cross-tenant one except the upkeep functions the migrations define."""
    target = f"FOR ROLE {_ident(owner)}"
    return [
        f"ALTER DEFAULT PRIVILEGES {target} GRANT USAGE ON SCHEMAS TO {_ident(app)}",
        f"ALTER DEFAULT PRIVILEGES {target}"
        f" GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO {_ident(app)}",
        f"ALTER DEFAULT PRIVILEGES {target} GRANT USAGE, SELECT ON SEQUENCES TO {_ident(app)}",
        f"ALTER DEFAULT PRIVILEGES {target} GRANT EXECUTE ON FUNCTIONS TO {_ident(app)}",
    ]
