"""The database ceiling: pgbench single-row UPDATEs on one hot row and spread over 10,000 rows."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from bench.database import Server, admin
from bench.stats import Histogram, summary_ms

SPREAD_ROWS = 10_000
_SPREAD = f"\\set id random(1, {SPREAD_ROWS})\nUPDATE bench_spread SET n = n + 1 WHERE id = :id;\n"
# `one` is `spread` at one client: the commit latency a single caller cannot go below.
SCRIPTS = {
    "hot": "UPDATE bench_hot SET n = n + 1 WHERE id = 1;\n",
    "spread": _SPREAD,
    "one": _SPREAD,
}
SETUP = (
    "DROP TABLE IF EXISTS bench_hot, bench_spread",
    "CREATE TABLE bench_hot (id int PRIMARY KEY, n bigint NOT NULL)",
    "INSERT INTO bench_hot VALUES (1, 0)",
    "CREATE TABLE bench_spread (id int PRIMARY KEY, n bigint NOT NULL)",
    f"INSERT INTO bench_spread SELECT g, 0 FROM generate_series(1, {SPREAD_ROWS}) g",
    "VACUUM ANALYZE bench_hot",
    "VACUUM ANALYZE bench_spread",
)
TPS = re.compile(r"^tps = ([\d.]+) \(without initial connection time\)", re.M)


def pgbench_binary(server: Server) -> str | None:
    if server.bin_dir is not None and (server.bin_dir / "pgbench").exists():
        return str(server.bin_dir / "pgbench")
    found = shutil.which("pgbench") or (
        "/usr/bin/pgbench" if Path("/usr/bin/pgbench").exists() else None
    )
    if found:
        return found
    try:
        import pgserver
    except ImportError:
        return None
    bundled = Path(pgserver.__file__).parent / "pginstall" / "bin" / "pgbench"
    return str(bundled) if bundled.exists() else None


async def prepare(url: str) -> None:
    await admin(url, *SETUP)


def _latencies(log_dir: Path, prefix: str) -> Histogram:
    """Per-transaction log lines `client tx latency_us script epoch us`: the third field."""
    hist = Histogram()
    for path in log_dir.glob(f"{prefix}.*"):
        for line in path.read_text().splitlines():
            fields = line.split()
            if len(fields) >= 3 and fields[2].isdigit():
                hist.record(int(fields[2]) / 1e6)
    return hist


def run(binary: str, url: str, name: str, clients: int, seconds: float) -> dict[str, Any]:
    """One pgbench run of script `name`; tps and per-transaction latency percentiles."""
    with tempfile.TemporaryDirectory(prefix="ration-pgbench-") as tmp:
        work = Path(tmp)
        script = work / f"{name}.sql"
        script.write_text(SCRIPTS[name])
        threads = max(1, min(clients, os.cpu_count() or 1))
        argv = [
            binary, "-n", "-M", "prepared", "-c", str(clients), "-j", str(threads),
            "-T", str(max(1, round(seconds))), "-f", str(script),
            "-l", f"--log-prefix={work / name}", url,
        ]  # fmt: skip
        done = subprocess.run(argv, cwd=work, capture_output=True, text=True, timeout=seconds + 120)
        figure: dict[str, Any] = {
            "scenario": f"pgbench.{name}",
            "clients": clients,
            "threads": threads,
            "duration_s": max(1, round(seconds)),
            "rows": 1 if name == "hot" else SPREAD_ROWS,
        }
        match = TPS.search(done.stdout)
        if done.returncode != 0 or match is None:
            reason = (done.stderr or done.stdout).strip()[-500:]
            return {
                **figure,
                "status": "failed",
                "reason": f"pgbench exit {done.returncode}: {reason}",
            }
        hist = _latencies(work, name)
        return {
            **figure,
            "status": "ok",
            "tps": round(float(match[1]), 1),
            "transactions": hist.count,
            **summary_ms(hist),
        }
