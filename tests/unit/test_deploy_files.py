"""The container image and docker-compose.yml wire what the services really read and listen on."""

from __future__ import annotations

import fnmatch
import hashlib
import json
import re
import shlex
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from budget_service.usecases.notify_settings import NotifySettings
from budget_service.usecases.settings import BudgetSettings
from memory_service.usecases.settings import MemorySettings
from servicekit import pgroles
from servicekit.auth import TokenTable
from servicekit.settings import Env, ServerSettings, SettingsError

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "deploy" / "Dockerfile"
COMPOSE = ROOT / "docker-compose.yml"
RATION_SERVICES: dict[str, type[BudgetSettings] | type[MemorySettings]] = {
    "budget": BudgetSettings,
    "memory": MemorySettings,
}
# Addresses that bind every interface: /metrics has no authentication and must never use them.
WILDCARDS = {"0.0.0.0", "::", "0:0:0:0:0:0:0:0", "", "*"}
DEV_TOKENS = {
    "ration-dev-admin-token": {"admin"},
    "ration-dev-writer-token": {"writer"},
    "ration-dev-reader-token": {"reader"},
}


# ---- Dockerfile --------------------------------------------------------------------------------


@dataclass
class Stage:
    base: str
    name: str
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, keyword: str) -> list[str]:
        return [args for key, args in self.instructions if key == keyword]


def dockerfile_stages() -> tuple[dict[str, str], list[Stage]]:
    """(global ARG defaults, stages) of deploy/Dockerfile, continuation lines joined."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    args: dict[str, str] = {}
    stages: list[Stage] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        keyword, _, rest = line.partition(" ")
        keyword, rest = keyword.upper(), rest.strip()
        if keyword == "ARG" and not stages:
            name, _, default = rest.partition("=")
            args[name] = default
        elif keyword == "FROM":
            parts = rest.split()
            base = re.sub(r"\$\{(\w+)\}", lambda m: args[m[1]], parts[0])
            name = parts[2] if len(parts) == 3 and parts[1].upper() == "AS" else str(len(stages))
            stages.append(Stage(base, name))
        else:
            stages[-1].instructions.append((keyword, rest))
    return args, stages


def image_env() -> dict[str, str]:
    """The ENV of the runtime stage: what every container starts with."""
    env: dict[str, str] = {}
    for args in dockerfile_stages()[1][-1].all("ENV"):
        for item in shlex.split(args):
            name, _, value = item.partition("=")
            env[name] = value
    return env


def dockerignored(relative: str) -> bool:
    """Whether .dockerignore keeps a path (or a folder above it) out of the build context.

    Docker's rules for the patterns this repository uses: a pattern matches a path from the
    context root, `**/` matches at any depth, the last matching line wins, `!` re-includes.
    """
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    patterns = [line.strip() for line in lines if line.strip() and not line.startswith("#")]
    parts = relative.strip("/").split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    excluded = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        pattern = pattern.lstrip("!").strip("/")
        if pattern.startswith("**/"):
            hit = any(fnmatch.fnmatchcase(part, pattern[3:]) for part in parts)
        else:
            hit = any(fnmatch.fnmatchcase(prefix, pattern) for prefix in prefixes)
        if hit:
            excluded = not negate
    return excluded


def test_dockerignore_keeps_local_state_out_and_the_sources_in() -> None:
    for path in (
        ".venv/bin/python",
        ".git/HEAD",
        "tests/conftest.py",
        "var/pgdata/PG_VERSION",
        "servicekit/__pycache__/cli.cpython-311.pyc",
        "ration.egg-info/PKG-INFO",
    ):
        assert dockerignored(path), path
    for path in ("ration_server/cli.py", "gen/python/ration/budget/v1/budget_pb2.py", "README.md"):
        assert not dockerignored(path), path


def test_dockerfile_builds_in_one_stage_and_runs_from_a_slim_python_in_another() -> None:
    _, stages = dockerfile_stages()
    assert len(stages) >= 2
    builder, runtime = stages[0], stages[-1]
    assert any("pip install ." in run for run in builder.all("RUN"))
    assert runtime.base == "python:3.11-slim"
    assert builder.base == runtime.base, "the venv's python symlink must exist in the runtime"
    copies = runtime.all("COPY")
    assert copies == [f"--from={builder.name} /opt/ration /opt/ration"]


def test_dockerfile_runs_as_a_numeric_non_root_user() -> None:
    runtime = dockerfile_stages()[1][-1]
    users = runtime.all("USER")
    assert users, "the runtime stage must set USER"
    uid = users[-1].split(":")[0]
    assert uid.isdigit(), "numeric, so Kubernetes runAsNonRoot can verify it"
    assert int(uid) > 0


def test_every_dockerfile_copy_source_exists_and_is_in_the_build_context() -> None:
    _, stages = dockerfile_stages()
    names = {stage.name for stage in stages}
    for stage in stages:
        for args in stage.all("COPY"):
            words = args.split()
            flags = [w for w in words if w.startswith("--")]
            sources = [w for w in words if not w.startswith("--")][:-1]
            if any(flag.startswith("--from=") for flag in flags):
                assert flags[0].removeprefix("--from=") in names
                continue
            for source in sources:
                assert (ROOT / source).exists(), source
                assert not dockerignored(source), f"{source} is excluded by .dockerignore"


def test_the_image_gets_everything_pip_install_reads() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    builder = dockerfile_stages()[1][0]
    copied = {
        source.strip("/")
        for args in builder.all("COPY")
        for source in args.split()[:-1]
        if not source.startswith("--")
    }
    assert {"pyproject.toml", project["project"]["readme"]} <= copied
    include = project["tool"]["setuptools"]["packages"]["find"]["include"]
    for where in project["tool"]["setuptools"]["packages"]["find"]["where"]:
        for package in (ROOT / where).iterdir():
            if (package / "__init__.py").exists() and any(
                fnmatch.fnmatchcase(package.name, pattern) for pattern in include
            ):
                top = package.relative_to(ROOT).parts[0]
                assert top in copied, f"{top} holds package {package.name}"


def test_the_image_runs_the_ration_command_and_exposes_its_ports() -> None:
    runtime = dockerfile_stages()[1][-1]
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "ration" in project["project"]["scripts"]
    assert json.loads(runtime.all("ENTRYPOINT")[-1]) == ["ration"]
    exposed = {int(port) for args in runtime.all("EXPOSE") for port in args.split()}
    env = image_env() | {"RATION_TOKEN_FILE": str(ROOT / "deploy" / "compose" / "tokens.json")}
    for settings_class in RATION_SERVICES.values():
        server = settings_class.from_env(Env(env)).server
        assert server.host == "0.0.0.0"
        assert {server.port, server.metrics_port} <= exposed


def test_the_image_serves_metrics_on_loopback_until_a_deployment_binds_them() -> None:
    env = image_env() | {"RATION_TOKEN_FILE": str(ROOT / "deploy" / "compose" / "tokens.json")}
    for settings_class in RATION_SERVICES.values():
        server = settings_class.from_env(Env(env)).server
        assert server.metrics_host == "127.0.0.1"


def test_the_image_refuses_to_listen_beyond_loopback_without_tokens() -> None:
    for settings_class in RATION_SERVICES.values():
        with pytest.raises(SettingsError, match="RATION_TOKEN_FILE"):
            settings_class.from_env(Env(image_env()))


def test_the_image_writes_only_under_tmp() -> None:
    env = image_env()
    assert env["HOME"] == "/tmp"
    assert env["RATION_DATA_DIR"].startswith("/tmp/")
    assert env["PYTHONDONTWRITEBYTECODE"] == "1"
    assert dockerfile_stages()[1][-1].all("WORKDIR")[-1] == "/tmp"


# ---- docker-compose.yml ------------------------------------------------------------------------


def compose() -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    return document


def service(name: str) -> dict[str, Any]:
    services: dict[str, Any] = compose()["services"]
    return services[name]


def bind_mounts(name: str) -> dict[str, Path]:
    """Container path → host path of a service's bind mounts."""
    mounts = {}
    for volume in service(name).get("volumes", []):
        source, target = volume.split(":")[:2]
        if source.startswith("."):
            mounts[target] = (ROOT / source).resolve()
    return mounts


def container_env(name: str) -> dict[str, str]:
    """The image's ENV overlaid with the service's environment, as the container sees it."""
    env = image_env() | {k: str(v) for k, v in service(name).get("environment", {}).items()}
    # Files the container reads from a bind mount are read here from the repository.
    mounts = bind_mounts(name)
    return {key: str(mounts.get(value, value)) for key, value in env.items()}


def published(name: str) -> dict[int, int]:
    """Container port → host port."""
    ports = {}
    for spec in service(name).get("ports", []):
        *_, host, container = str(spec).split(":")
        ports[int(container)] = int(host)
    return ports


def test_compose_file_parses_into_the_full_stack() -> None:
    assert set(compose()["services"]) == {
        "postgres",
        "migrate",
        "budget",
        "memory",
        "notify",
        "prometheus",
        "grafana",
    }


def test_compose_notify_reads_its_webhooks_and_is_scraped_and_probed() -> None:
    env = container_env("notify")
    settings = NotifySettings.from_env(Env(env))
    assert service("notify")["command"] == ["notify"]
    assert not settings.dev_mode
    assert settings.metrics == ("notify", 9466)
    assert settings.health is not None
    assert set(published("notify")) == {settings.metrics[1]}
    assert f"'127.0.0.1:{settings.health[1]}'" in service("notify")["healthcheck"]["test"][-1]
    scrape = yaml.safe_load((ROOT / "deploy" / "prometheus" / "prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in scrape["scrape_configs"]}
    assert jobs["notify"]["static_configs"][0]["targets"] == ["notify:9466"]
    assert service("notify")["depends_on"]["migrate"] == {
        "condition": "service_completed_successfully"
    }
    assert service("notify")["read_only"] is True


def test_every_file_compose_builds_from_or_mounts_exists() -> None:
    for name, spec in compose()["services"].items():
        build = spec.get("build")
        if build:
            context = ROOT / build["context"]
            assert (context / build["dockerfile"]).is_file(), name
        for volume in spec.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("."):
                assert (ROOT / source).exists(), f"{name} mounts missing {source}"


@pytest.mark.parametrize("name", sorted(RATION_SERVICES))
def test_compose_ports_are_the_ports_the_service_listens_on(name: str) -> None:
    settings = RATION_SERVICES[name].from_env(Env(container_env(name)))
    server: ServerSettings = settings.server
    assert server.host == "0.0.0.0"
    # The container's own name on the compose network (its /etc/hosts entry), which is what
    # Prometheus scrapes and where the published port is forwarded; never every interface.
    assert server.metrics_host == service(name)["hostname"] == name
    assert server.token_file is not None, "a non-loopback bind needs the token file"
    assert set(published(name)) == {server.port, server.metrics_port}
    probe = service(name)["healthcheck"]["test"]
    assert f"'127.0.0.1:{server.port}'" in probe[-1]
    scrape = yaml.safe_load((ROOT / "deploy" / "prometheus" / "prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in scrape["scrape_configs"]}
    assert jobs[name]["static_configs"][0]["targets"] == [f"{name}:{server.metrics_port}"]


def test_no_metrics_bind_of_the_image_or_compose_is_every_interface() -> None:
    binds = {"image": image_env()} | {name: container_env(name) for name in RATION_SERVICES}
    for where, env in binds.items():
        for variable in ("RATION_BUDGET_METRICS_LISTEN", "RATION_MEMORY_METRICS_LISTEN"):
            if variable in env:
                host = env[variable].rpartition(":")[0].strip("[]")
                assert host not in WILDCARDS, f"{where}: {variable}={env[variable]}"


def test_compose_services_start_after_postgres_is_healthy_and_migrations_ran() -> None:
    assert service("migrate")["command"] == ["migrate"]
    assert service("migrate")["depends_on"] == {"postgres": {"condition": "service_healthy"}}
    assert "pg_isready" in " ".join(service("postgres")["healthcheck"]["test"])
    for name in RATION_SERVICES:
        spec = service(name)
        assert spec["command"] == [name, "serve"]
        assert spec["depends_on"]["postgres"] == {"condition": "service_healthy"}
        assert spec["depends_on"]["migrate"] == {"condition": "service_completed_successfully"}
        settings = RATION_SERVICES[name].from_env(Env(container_env(name)))
        assert settings.database.migrate_on_start is False, "the migrate service owns migrations"
    assert service("grafana")["depends_on"]["prometheus"] == {"condition": "service_healthy"}


COMPOSE_ROLES = {"ration_owner": "ration-owner", "ration_app": "ration-app"}


def test_compose_services_reach_the_compose_postgres_as_the_application_role() -> None:
    for name in ("migrate", *RATION_SERVICES):
        url = urlsplit(container_env(name)["RATION_DATABASE_URL"])
        assert (url.hostname, url.port, url.path) == ("postgres", 5432, "/ration")
        assert (url.username, url.password) == ("ration_app", COMPOSE_ROLES["ration_app"])
        assert ("RATION_MIGRATE_DATABASE_URL" in container_env(name)) == (name == "migrate")
    owner = urlsplit(container_env("migrate")["RATION_MIGRATE_DATABASE_URL"])
    assert (owner.hostname, owner.path) == ("postgres", "/ration")
    assert (owner.username, owner.password) == ("ration_owner", COMPOSE_ROLES["ration_owner"])


def test_compose_postgres_creates_the_two_roles_with_the_documented_sql() -> None:
    mounts = bind_mounts("postgres")
    script = mounts["/docker-entrypoint-initdb.d/10-ration-roles.sql"]
    sql = (ROOT / script).read_text()
    readmes = [(ROOT / p).read_text() for p in ("README.md", "deploy/README.md")]
    statements = [
        *pgroles.role_statements("ration_owner", "ration_app", *COMPOSE_ROLES.values()),
        pgroles.database_statement("ration", "ration_owner"),
        *pgroles.database_statements("ration_owner", "ration_app"),
    ]
    for statement in statements:
        assert statement + ";" in sql
        documented = statement.replace("'ration-owner'", "'change-me-owner'")
        for readme in readmes:
            assert documented.replace("'ration-app'", "'change-me-app'") + ";" in readme


def test_compose_ration_containers_are_read_only_with_a_tmpfs() -> None:
    for name in ("migrate", *RATION_SERVICES):
        spec = service(name)
        assert spec["read_only"] is True
        assert spec["tmpfs"] == ["/tmp"]
        assert spec["cap_drop"] == ["ALL"]


def test_compose_dev_tokens_are_the_documented_ones() -> None:
    table = TokenTable.load(ROOT / "deploy" / "compose" / "tokens.json")
    readme = (ROOT / "deploy" / "README.md").read_text()
    for token, roles in DEV_TOKENS.items():
        identity = table.authenticate(f"Bearer {token}")
        assert (identity.tenant, set(identity.roles)) == ("dev", roles)
        assert f"`{token}`" in readme
    digests = [
        row["sha256"]
        for row in json.loads((ROOT / "deploy" / "compose" / "tokens.json").read_text())["tokens"]
    ]
    assert sorted(digests) == sorted(hashlib.sha256(t.encode()).hexdigest() for t in DEV_TOKENS)


def test_compose_prometheus_reads_the_mounted_config_and_rules() -> None:
    spec = service("prometheus")
    mounts = bind_mounts("prometheus")
    config_path = next(
        arg.split("=", 1)[1] for arg in spec["command"] if arg.startswith("--config.file=")
    )
    config_host = mounts[config_path]
    assert config_host == ROOT / "deploy" / "prometheus" / "prometheus.yml"
    config = yaml.safe_load(config_host.read_text())
    for rule_file in config["rule_files"]:
        in_container = str(Path(config_path).parent / rule_file)
        assert in_container in mounts, f"{rule_file} is not mounted next to the config"
        assert mounts[in_container].is_file()


def test_compose_grafana_provisions_the_datasource_and_the_dashboards() -> None:
    mounts = bind_mounts("grafana")
    provisioning = mounts["/etc/grafana/provisioning"]
    assert provisioning == ROOT / "deploy" / "grafana" / "provisioning"
    providers = yaml.safe_load((provisioning / "dashboards" / "dashboards.yml").read_text())
    dashboards_dir = providers["providers"][0]["options"]["path"]
    assert mounts[dashboards_dir] == ROOT / "deploy" / "grafana" / "dashboards"
    home = service("grafana")["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert (mounts[str(Path(home).parent)] / Path(home).name).is_file()
    sources = yaml.safe_load((provisioning / "datasources" / "prometheus.yml").read_text())
    (source,) = sources["datasources"]
    url = urlsplit(source["url"])
    assert source["type"] == "prometheus"
    assert url.hostname == "prometheus"
    assert url.port in published("prometheus")
