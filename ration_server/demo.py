"""`ration demo`: a scripted agent run that a budget stops, shown live from the event stream."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from ration_client import (
    Amounts,
    BudgetClient,
    BudgetExhausted,
    BudgetPolicy,
    Dimension,
    MemoryClient,
    ModelPatterns,
    StoppedBy,
    usd,
)
from ration_client.views import nanos_to_usd

MODEL = "gpt-4o-mini"
SEED_MEMORIES = (
    "The user is planning a trip to Lisbon in May.",
    "The user prefers window seats and vegetarian meals.",
    "Budget for the whole trip is 2,000 EUR.",
)


@dataclass(frozen=True)
class Usage:
    input_tokens: int
    output_tokens: int
    cost_nanos: int


def fake_provider(prompt: str, turn: int) -> Usage:
    """A deterministic stand-in for a model provider: it bills what a real one would report."""
    input_tokens = 400 + len(prompt) // 4
    output_tokens = 250 + 50 * turn
    # The provider's own price list stays here; ration only ever sees aggregate cost.
    cost = input_tokens * 5_000 + output_tokens * 20_000
    return Usage(input_tokens, output_tokens, cost)


def bar(consumed: float, limit: float, width: int = 20) -> str:
    filled = min(width, round(width * consumed / limit)) if limit else width
    return "█" * filled + "░" * (width - filled)


def describe(event_type: str, payload: dict[str, object]) -> str:
    if event_type == "budget.reserved":
        limits = payload["effectiveBudget"]
        shown = ", ".join(f"{k} {v}" for k, v in limits.items()) if isinstance(limits, dict) else ""
        return f"effective budget: {shown} (binding scope: {payload['scope']})"
    if event_type == "budget.consumed":
        consumed, limit = float(str(payload["consumed"])), float(str(payload["limit"]))
        return f"{payload['dimension']:<9} {bar(consumed, limit)} {consumed:g}/{limit:g}"
    if event_type == "budget.threshold.crossed":
        return f"{payload['dimension']} crossed {payload['percent']}% ({payload['consumed']})"
    if event_type == "budget.exhausted":
        return f"{payload['dimension']} exhausted at {payload['consumed']}/{payload['limit']}"
    if event_type == "cap.breached":
        return f"BREACH {payload['kind']}: limit {payload['limit']}, observed {payload['observed']}"
    if event_type == "run.failed":
        error = payload["error"]
        return f"run failed: {error['code'] if isinstance(error, dict) else error}"
    return json.dumps(payload, sort_keys=True)


async def follow(budget: BudgetClient, run_id: str, say: Callable[[str], None]) -> None:
    """The live burn-down: one line per budget event, straight from WatchRunEvents."""
    async for event in budget.watch(run_id):
        line = describe(event.type, json.loads(event.payload_json))
        say(f"  event {event.seq:>2} {event.type:<25} {line}")
        if event.type == "run.failed":
            return


async def run_demo(
    budget_address: str,
    memory_address: str,
    *,
    token: str | None = None,
    say: Callable[[str], None] = print,
    turns: int = 12,
) -> dict[str, object]:
    """Runs the scripted agent and returns the summary it printed (for tests)."""
    run_id = f"demo-{uuid.uuid4().hex[:8]}"
    memory_ref = f"demo/{run_id}"
    async with (
        BudgetClient(budget_address, token=token) as budget,
        MemoryClient(memory_address, token=token) as memory,
    ):
        policy = BudgetPolicy(
            max_cost_nanos=usd("0.045"),
            max_tool_calls=20,
            threshold_percent=80,
            model_allow=ModelPatterns(patterns=["gpt-4o*", "claude-*"]),
        )
        await budget.open_run(run_id, project_id="demo", agent_id="travel-agent", policy=policy)
        say(f"run {run_id}: max cost $0.045, 20 tool calls, threshold 80%, models gpt-4o*/claude-*")
        await memory.append(memory_ref, SEED_MEMORIES)
        watcher = asyncio.create_task(follow(budget, run_id, say))
        stopped_by = ""
        billed = {"cost (USD)": 0, "tool calls": 0, "tokens": 0}
        for turn in range(1, turns + 1):
            listed = await memory.list(memory_ref, token_budget=60)
            say(
                f"turn {turn}: memory {len(listed.entries)}/{listed.candidate_count} entries, "
                f"{listed.total_tokens} tokens (budget 60, stopped by "
                f"{'budget' if listed.stopped_by is StoppedBy.BUDGET else 'nothing'})"
            )
            prompt = "\n".join(item.content for item in listed.entries)
            try:
                estimate = Amounts(tokens=2_000, cost_nanos=usd("0.004"))
                async with budget.call(run_id, model=MODEL, estimate=estimate) as reservation:
                    usage = fake_provider(prompt, turn)
                    billed["tokens"] += usage.input_tokens + usage.output_tokens
                    billed["cost (USD)"] += usage.cost_nanos
                    await reservation.consume(
                        Amounts(
                            tokens=usage.input_tokens + usage.output_tokens,
                            cost_nanos=usage.cost_nanos,
                        )
                    )
                async with budget.tool_call(run_id) as tool:
                    billed["tool calls"] += 1
                    await tool.consume(Amounts(tool_calls=1))
            except BudgetExhausted as exhausted:
                stopped_by = f"{exhausted.reason} ({exhausted.dimension})"
                say(f"turn {turn}: refused: {stopped_by}")
                break
            key = f"sk-live-{uuid.uuid4().hex}"
            await memory.append(
                memory_ref,
                [f"Turn {turn}: booked step {turn}; deploy key {key} used for the booking API."],
                secrets={"booking_api_key": key},
            )
        await asyncio.wait_for(watcher, timeout=10)
        run = await budget.get_run(run_id)
        listed = await memory.list(memory_ref, token_budget=400)
        redacted = [item.content for item in listed.entries if "[REDACTED:" in item.content]
        say(f"memory after the run: {redacted[0] if redacted else '(no redacted entry listed)'}")
        say("")
        say("summary (billed: what the provider reported; consumed and limit: GetRun)")
        say(f"{'dimension':<12}{'billed':>12}{'consumed':>12}{'limit':>12}")
        summary: dict[str, object] = {"run_id": run_id, "stopped_by": stopped_by}
        rows = (
            (Dimension.COST, "cost (USD)"),
            (Dimension.TOOL_CALLS, "tool calls"),
            (Dimension.TOKENS, "tokens"),
        )
        for dimension, name in rows:
            status = run.status(dimension)  # the run's own (Decimal USD for cost)
            amount = billed[name]
            spent = nanos_to_usd(amount) if dimension is Dimension.COST else amount
            limit = "unbounded" if status.limit is None else f"{float(status.limit):g}"
            say(f"{name:<12}{float(spent):>12g}{float(status.consumed):>12g}{limit:>12}")
            summary[name] = (spent, status.consumed)
        state = run.state.name
        say(f"run state: {state} {run.failure_code}".rstrip())
        summary["state"] = state
        summary["redacted"] = redacted
        return summary
