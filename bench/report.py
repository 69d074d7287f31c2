"""Writes a run's results: results/latest.json, RESULTS.md and latency_vs_size.png."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench import chart, meter, noisy_flow
from bench.budget import FEW_CALLERS
from bench.targets import evaluate

CHART = "latency_vs_size.png"
# Per figure kind: the ceilings it is shown beside, as (ceiling, metric, own metric, label).
CEILINGS: dict[str, list[tuple[str, str, str, str]]] = {
    "budget.pairs_spread": [
        ("echo", "rpc_per_s", "rpc_per_s", "echo RPC/s"),
        ("pgbench.spread", "tps", "rpc_per_s", "pgbench spread tps"),
    ],
    f"budget.pairs_spread_{FEW_CALLERS}": [
        (f"echo_{FEW_CALLERS}", "rpc_per_s", "rpc_per_s", f"echo ({FEW_CALLERS} callers) RPC/s"),
    ],
    "budget.pairs_hot": [
        ("echo", "rpc_per_s", "rpc_per_s", "echo RPC/s"),
        ("pgbench.hot", "tps", "rpc_per_s", "pgbench hot tps"),
    ],
    "budget.check": [
        ("echo", "p99_ms", "p99_ms", "echo p99"),
        ("echo", "rpc_per_s", "rpc_per_s", "echo RPC/s"),
    ],
    "budget.pairs_1": [
        ("echo_1", "p50_ms", "p50_ms", "echo (1 caller) p50"),
        ("pgbench.one", "p50_ms", "p50_ms", "one-client commit p50"),
        ("floor.pair_1", "p50_ms", "op_p50_ms", "pair floor p50"),
    ],
    "budget.check_1": [
        ("echo_1", "p50_ms", "p50_ms", "echo (1 caller) p50"),
        ("echo_1", "p99_ms", "p99_ms", "echo (1 caller) p99"),
    ],
    "budget.pairs_big_tenant": [
        ("echo", "rpc_per_s", "rpc_per_s", "echo RPC/s"),
    ],
    "budget.pairs_hot_big": [
        ("echo", "rpc_per_s", "rpc_per_s", "echo RPC/s"),
    ],
    "memory.append": [
        ("echo", "p50_ms", "p50_ms", "echo p50"),
        ("pgbench.spread", "p50_ms", "p50_ms", "pgbench spread p50"),
    ],
    "memory.append_fresh": [
        ("echo", "p50_ms", "p50_ms", "echo p50"),
        ("pgbench.spread", "p50_ms", "p50_ms", "pgbench spread p50"),
    ],
    "memory.list_recency": [
        ("echo", "rpc_per_s", "rpc_per_s", "echo RPC/s"),
        ("echo", "p99_ms", "p99_ms", "echo p99"),
    ],
    "memory.list_relevance": [
        ("echo", "rpc_per_s", "rpc_per_s", "echo RPC/s"),
        ("echo", "p99_ms", "p99_ms", "echo p99"),
    ],
}
NOTES = f"""\
- Every RPC/s counts unary RPCs, each one round trip, at the same number of callers in flight as
  the echo ceiling. A Reserve+Consume pair is **2 RPCs**: its RPC/s counts both, pairs/s is half
  of it, p50/p99 are per RPC (per-pair latency is `op_p50_ms`/`op_p99_ms` in the JSON).
- Check, ListMemory and echo run at the same concurrency, so their p99s compare directly.
- Worker share: the RPCs each server worker handled during the figure (from each worker's
  `/metrics`); the kernel spreads connections over SO_REUSEPORT workers by hash, not by load.
- AppendEntries: one caller, sequential single-entry appends (about 250 per size), round robin
  over `memories` memories of that size, each starting at `entries_from` and growing by at most
  max(50, size/20) appends, so every sample is taken at or just below the size; the first memory
  is then topped up to exactly that size for ListMemory.
- AppendEntries, never analyzed (`memory.append_fresh`): the same appends on memories of their
  own, measured right after the prefill with autovacuum off on the memory tables, before the
  VACUUM (ANALYZE) that precedes every other memory figure: a fresh deployment's first writes.
- ListMemory: token budget 800 in o200k_base; relevance ranks with a fixed query.
- Reserve+Consume at {FEW_CALLERS} callers is compared with echo at {FEW_CALLERS} callers
  (`echo_{FEW_CALLERS}`).
- One caller (`budget.pairs_1`, `budget.check_1`, `echo_1`, `pgbench.one`): the latency a lone
  agent sees; the floor of a pair is two round trips and two commits (`floor.pair_1`).
- Tenant size: `budget.pairs_big_tenant` is `budget.pairs_spread` again after the tenant grew (in
  SQL, copies of rows the service wrote) to 100k runs holding 1M holds, one in ten open;
  `budget.pairs_hot_big` is `budget.pairs_hot` after 100k settled holds on the hot run. The budget
  tables are never analyzed during the run (autovacuum off on them), as on a fresh deployment.
- pgbench: single-row `UPDATE … SET n = n + 1` in autocommit (`-n -M prepared`), one hot row
  or a random row of 10,000; it runs alone, before any service starts.
"""


def _num(value: Any, digits: int = 2) -> str:
    if not isinstance(value, int | float):
        return "—"
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:,.{digits}f}"


def _kind(name: str) -> str:
    head, _, tail = name.rpartition(".")
    return head if tail.isdigit() else name


def _ceiling_cells(results: dict[str, Any], name: str, figure: dict[str, Any]) -> tuple[str, str]:
    shown, ratios = [], []
    for ceiling, metric, own, label in CEILINGS.get(_kind(name), []):
        base = results["ceilings"].get(ceiling, {})
        value = base.get(metric) if base.get("status") == "ok" else None
        shown.append(f"{label} {_num(value)}")
        mine = figure.get(own)
        if isinstance(value, int | float) and value and isinstance(mine, int | float):
            ratios.append(f"{mine / value:.2f}× {label}")
    return "; ".join(shown) or "—", "; ".join(ratios) or "—"


def _status(figure: dict[str, Any]) -> str:
    reason = str(figure.get("reason", "")).replace("|", "/").replace("\n", " ")
    return f"{figure.get('status')}: {reason[:160]}"


def _errors(figure: dict[str, Any]) -> str:
    errors = figure.get("errors") or {}
    return ", ".join(f"{k} ×{v}" for k, v in errors.items()) or "0"


def _machine(results: dict[str, Any]) -> list[str]:
    m, cfg = results["machine"], results["config"]
    return [
        "## Machine",
        "",
        "| | |",
        "|---|---|",
        f"| CPUs (nproc) | {m.get('nproc')} × {m.get('cpu_model')} |",
        f"| memory | {m.get('memory_gib')} GiB |",
        f"| kernel | {m.get('kernel')} |",
        f"| Python / grpcio | {m.get('python')} / {m.get('grpcio')} |",
        f"| Postgres | {m.get('postgres')} ({m.get('postgres_source')}) |",
        f"| server workers | {m.get('server_workers')} per service and for echo (SO_REUSEPORT) |",
        f"| load | {m.get('load_processes')} processes, {m.get('concurrency')} callers, "
        f"{cfg['duration']} s per figure after {cfg['warmup']} s warm-up |",
        f"| load average at start | {m.get('loadavg_at_start')} |",
        "",
    ]


def _targets(results: dict[str, Any]) -> list[str]:
    out = [
        "## Targets",
        "",
        "| target | measured | ratio | bound | verdict |",
        "|---|---|---|---|---|",
    ]
    for row in results["targets"]:
        if row["status"] == "not available":
            reason = str(row["reason"]).replace("|", "/")[:120]
            out.append(f"| {row['target']} | — | — | {row['bound']} | not available: {reason} |")
            continue
        verdict = "**met**" if row["status"] == "met" else f"**not met** ({row['shortfall']})"
        out.append(
            f"| {row['target']} | {_num(row['value'])} ÷ {_num(row['against'])} | "
            f"{row['ratio']:.2f} | {row['bound']} | {verdict} |"
        )
    return [*out, ""]


def _ceilings(results: dict[str, Any]) -> list[str]:
    out = [
        "## Ceilings",
        "",
        "| ceiling | rate | p50 ms | p99 ms | notes |",
        "|---|---|---|---|---|",
    ]
    for name, c in results["ceilings"].items():
        if c.get("status") != "ok":
            out.append(f"| {name} | {_status(c)} | | | |")
            continue
        if "tps" in c:
            rate = f"{_num(c['tps'])} tps"
            note = f"-c {c['clients']} -j {c['threads']}, {c['rows']:,} row(s)"
        elif "rpc_per_s" in c:
            rate = f"{_num(c['rpc_per_s'])} RPC/s"
            note = f"{c.get('server_workers')} workers, {c['concurrency']} callers"
        else:  # a floor computed from other ceilings (floor.pair_1): no rate of its own
            rate, note = "—", str(c.get("scenario", ""))
        p99 = _num(c.get("p99_ms"))
        out.append(f"| {name} | {rate} | {_num(c['p50_ms'])} | {p99} | {note} |")
    return [*out, ""]


def _figures(results: dict[str, Any]) -> list[str]:
    out = [
        "## Figures",
        "",
        "| figure | RPC/s | p50 ms | p99 ms | errors | worker share | ceiling | ÷ ceiling |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, f in results["figures"].items():
        if f.get("status") != "ok":
            out.append(f"| {name} | {_status(f)} | | | | | | |")
            continue
        rate = _num(f["rpc_per_s"])
        share = "/".join(f"{x:.0%}" for x in f.get("worker_share", [])) or "—"
        if "pairs_per_s" in f:
            rate += f" ({_num(f['pairs_per_s'])} pairs/s)"
        ceiling, ratio = _ceiling_cells(results, name, f)
        out.append(
            f"| {name} | {rate} | {_num(f['p50_ms'])} | {_num(f['p99_ms'])} | {_errors(f)} | "
            f"{share} | {ceiling} | {ratio} |"
        )
    return [*out, "", NOTES]


CPU_NOTES = """\
- CPU per RPC: utime + stime (including reaped children) from `/proc/<pid>/stat` over the
  measured window, ÷ the RPCs completed in it (RPC/s × the interval). *server*: the service's
  supervisor and workers (echo's for the ceilings); *postgres*: the whole cluster, the
  postmaster and every backend and background process (other clients of a shared server count
  too); *load*: the load processes; *other*: the rest of the machine's busy time (`/proc/stat`:
  other processes, interrupts and softirqs of loopback TCP). n/a: not measurable (e.g. Postgres
  on another host).
- echo ÷ this: echo's server + postgres + load at the same callers in flight ÷ this figure's,
  the share of echo's RPC/s the figure's CPU cost allows when the CPUs are the bound.
- Mean batch: Δ `ration_budget_decide_batch_size_sum` ÷ Δ `…_count` over the window, summed over
  the budget workers' `/metrics`; n/a when the service does not export it.
"""


def _echo_total(results: dict[str, Any], callers: Any) -> float | None:
    """Total CPU per RPC of the echo ceiling measured at `callers` in flight."""
    for name, c in results["ceilings"].items():
        if name.startswith("echo") and c.get("status") == "ok" and c.get("concurrency") == callers:
            total = c.get("total_ms_per_rpc")
            return float(total) if isinstance(total, int | float) and total > 0 else None
    return None


def _cpu(results: dict[str, Any]) -> list[str]:
    rows = [
        (name, f)
        for section in ("ceilings", "figures")
        for name, f in results[section].items()
        if f.get("status") == "ok" and "cpu_rpcs" in f
    ]
    if not rows:
        return []
    out = [
        "## CPU per RPC",
        "",
        "| figure | callers | RPCs | server ms/RPC | postgres ms/RPC | load ms/RPC | total ms/RPC "
        "| other ms/RPC | echo ÷ this | mean batch |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, f in rows:
        cells = [
            meter.shown(f.get(f"{part}_ms_per_rpc"))
            for part in ("server", "postgres", "load", "total", "other")
        ]
        echo, total = _echo_total(results, f.get("concurrency")), f.get("total_ms_per_rpc")
        share = f"{echo / total:.2f}" if echo and isinstance(total, int | float) and total else "—"
        batch = meter.shown(f["mean_batch_size"]) if "mean_batch_size" in f else "—"
        out.append(
            f"| {name} | {f.get('concurrency')} | {f['cpu_rpcs']:,} | {' | '.join(cells)} "
            f"| {share} | {batch} |"
        )
    return [*out, "", CPU_NOTES]


SIZING_NOTES = """\
- Entry sizing: one entry of RATION_MEMORY_MAX_ENTRY_BYTES (64 KiB) of each kind with no word
  breaks (random `ACGT`, CJK ideographs, emoji, base64), the cases that made a pure-Python BPE
  quadratic. *ours* is `TokenCounter.sizes` (o200k_base, cl100k_base and chars, as stored at
  write); *tiktoken* is `encode_ordinary` of the same text in both encodings on Encodings
  loaded by tiktoken's own loader. Median of alternating runs, in the bench process.
"""


def _sizing(results: dict[str, Any]) -> list[str]:
    figure = results.get("sizing") or {}
    if not figure:
        return []
    out = ["## Entry sizing (worst case)", ""]
    if figure.get("status") != "ok":
        return [*out, _status(figure), ""]
    out += [
        f"Worst case: **{figure['worst']}**, {_num(figure['worst_ms'])} ms "
        f"(tiktoken {_num(figure['worst_tiktoken_ms'])} ms) for {figure['size_bytes']:,} "
        "bytes.",
        "",
        "| kind | UTF-8 bytes | o200k tokens | cl100k tokens | ours ms | tiktoken ms "
        "| ÷ tiktoken |",
        "|---|---|---|---|---|---|---|",
    ]
    for kind, k in figure["kinds"].items():
        tokens = k["tokens"]
        out.append(
            f"| {kind} | {k['bytes']:,} | {tokens['o200k_base']:,} | {tokens['cl100k_base']:,} | "
            f"{_num(k['ours_ms'])} | {_num(k['tiktoken_ms'])} | {_num(k['ratio'])} |"
        )
    return [*out, "", SIZING_NOTES]


NOISY_NOTES = """\
- noisy.reports, noisy.hot_runs, noisy.memory_writes: tenant B's Reserve+Consume p50 / p99 per
  RPC (8 callers on 200 runs of its own, beside 2 callers appending small entries to its
  memories, over twice the figure duration), alone and then while tenant A runs: 16 callers
  looping ReportSpend (a year, by model or by hour, one group a page) over a ledger of at least
  100k consume rows (copies, in SQL, of rows the service wrote, spread over 8,000 hours and 20
  models); 64 callers on Reserve+Consume over 16 runs; 36 callers each appending 60 entries of
  15 KB (900 KB, near the 1 MiB of text a write may carry) to a new memory. A starts 1 s before
  B's warm-up and runs until B's window closes, all its calls counted and none outliving that
  (DEADLINE_EXCEEDED); its callers wait out RESOURCE_EXHAUSTED as its RetryInfo says (at most 1
  s). *A*: what A achieved (RPC/s, errors: throttling is expected). *B's appends*: the same
  ratio for B's small appends ("no successful RPC": none finished inside the figure). Both
  services run with the usual workers and a token per tenant.
- noisy.notify: tenant B's `run.failed` alert, from the refused Reserve's answer to its arrival
  at B's receiver, through one `ration notify`; alone, then while all of tenant A's 36 webhooks
  drip (one byte every 0.2 s, each POST cut at its 3 s deadline and retried). SIGTERM: seconds
  from the signal to the process's exit with A's POSTs in flight.
- Target: B's p99 under A ÷ alone ≤ 2 (DESIGN 5): *≤ 2* says yes when every ratio of B's is
  (pairs, and the appends when measured; appends that never finished under A are a no). On a
  loaded shared machine one run's p99 is mostly the machine's noise: compare runs, not one
  figure.
- *Cores*: the CPUs the budget service, the memory service, Postgres and the whole machine kept
  busy on average while B ran alone → while A ran too (each phase from its load processes'
  start to their end; `/proc`, as for CPU per RPC). A machine near its core count while B runs
  alone has no room for A that B would not feel.
"""


def _noisy_note(f: dict[str, Any]) -> str:
    """What the noise did: A's rate and errors (or why A failed), B's appends; notify's own."""
    if "rounds" in f:
        return f"{f['rounds']} rounds; SIGTERM exit {_num(f['sigterm_exit_s'])} s"
    a = f.get("a") or {}
    if a.get("status") == "ok":
        rate = f"A {_num(a.get('rpc_per_s'))} RPC/s at {a.get('concurrency')} callers"
        note = f"{rate}, errors {_errors(a)}"
    else:
        note = f"A {_status(a)}, errors {_errors(a)}"
    appends = f.get("b_appends") or {}
    if appends.get("status") == "ok":
        note += (
            f"; B's appends p99 {_num(appends['alone_p99_ms'])} → "
            f"{_num(appends['under_p99_ms'])} ms ({_num(appends['ratio_p99'])}×)"
        )
    elif appends:
        note += f"; B's appends {_status(appends)}"
    cores = f.get("cores") or {}
    if cores.get("alone") and cores.get("under"):
        shown = ", ".join(
            f"{p} {_num(cores['alone'].get(p))} → {_num(cores['under'].get(p))}"
            for p in noisy_flow.CORE_PARTS
        )
        note += f"; cores {shown}"
    return note


def _noisy(results: dict[str, Any]) -> list[str]:
    noisy = results.get("noisy") or {}
    if not noisy:
        return []
    out = [
        "## Noisy neighbour",
        "",
        "| figure | B alone p50 / p99 ms | B under A p50 / p99 ms | p99 ratio | ≤ 2 | notes |",
        "|---|---|---|---|---|---|",
    ]
    for name, f in noisy.items():
        if f.get("status") != "ok":
            out.append(f"| {name} | {_status(f)} | | | | {_noisy_note(f)} |")
            continue
        ratio = f.get("ratio_p99")
        met = "—" if ratio is None else ("yes" if f.get("met", ratio <= 2) else "no")
        out.append(
            f"| {name} | {_num(f['alone_p50_ms'])} / {_num(f['alone_p99_ms'])} | "
            f"{_num(f['under_p50_ms'])} / {_num(f['under_p99_ms'])} | {_num(ratio)} | {met} | "
            f"{_noisy_note(f)} |"
        )
    return [*out, "", NOISY_NOTES]


def markdown(results: dict[str, Any], chart_drawn: bool) -> str:
    out = [
        "# ration benchmark results",
        "",
        f"`python -m bench` ({results['config']['mode']}), {results['started_at']}, "
        f"{results['elapsed_s']} s. Targets are ratios of figures measured side by side in this "
        "one run (issue 8); absolute numbers on a shared 2-core machine are noise.",
        "",
        *_machine(results),
        *_targets(results),
        *_ceilings(results),
        *_figures(results),
        *_noisy(results),
        *_cpu(results),
        *_sizing(results),
    ]
    if chart_drawn:
        out += [f"![AppendEntries and ListMemory latency against memory size]({CHART})", ""]
    if results.get("setup"):
        out += ["## Setup", "", "```json", json.dumps(results["setup"], indent=2), "```", ""]
    return "\n".join(out)


def write(results: dict[str, Any], out_dir: Path) -> dict[str, Path]:
    """Evaluates the targets and writes the three artefacts; returns their paths."""
    results["targets"] = evaluate(results)
    paths = {
        "json": out_dir / "results" / "latest.json",
        "markdown": out_dir / "RESULTS.md",
        "chart": out_dir / CHART,
    }
    paths["json"].parent.mkdir(parents=True, exist_ok=True)
    paths["json"].write_text(json.dumps(results, indent=2, sort_keys=False) + "\n")
    title = f"ration {results['config']['mode']} bench, {results['started_at']}"
    drawn = chart.draw(results["figures"], paths["chart"], title)
    paths["markdown"].write_text(markdown(results, drawn))
    if not drawn:
        del paths["chart"]
    return paths
