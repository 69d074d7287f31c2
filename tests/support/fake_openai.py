"""A fake OpenAI chat-completions server on loopback: real HTTP, the API's shapes, usage, SSE.

Every request is recorded. A reply is a tool call (`tool_call` names the tool) or text of
`output_tokens` words, never more than the request's max_tokens; usage counts the prompt as its
words plus one per message (never more than its UTF-8 bytes, the client's bound) and the output
as its words. With `hold_stream`, a streamed reply stops after its first chunk until
`release_stream` is set, so a test can cancel mid-stream without timing anything."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from ration_client import BudgetClient, Dimension
from ration_client.prices import ModelUsage, PriceCatalog
from ration_client.views import nanos_to_usd


def prompt_tokens(body: dict[str, Any]) -> int:
    words = 0
    for message in body.get("messages", []):
        words += 1 + len(json.dumps(message.get("content") or "").split())
        for call in message.get("tool_calls") or []:
            words += len(json.dumps(call).split())
    return words


@dataclass
class FakeOpenAI:
    """Scripted behaviour and what it saw; `url` is the base_url to give the SDK."""

    tool_call: str | None = None
    output_tokens: int = 20
    hold_stream: bool = False
    requests: list[dict[str, Any]] = field(default_factory=list)
    usages: list[dict[str, int]] = field(default_factory=list)
    stream_started: threading.Event = field(default_factory=threading.Event)
    release_stream: threading.Event = field(default_factory=threading.Event)
    url: str = ""

    def reply(self, body: dict[str, Any]) -> tuple[dict[str, Any], dict[str, int], str]:
        """The assistant message, its usage and finish reason for one request."""
        cap = body.get("max_completion_tokens") or body.get("max_tokens") or self.output_tokens
        n = len(self.requests)
        if self.tool_call is not None:
            args = json.dumps({"step": n})
            call = {"id": f"call_{n}", "type": "function"}
            call["function"] = {"name": self.tool_call, "arguments": args}  # type: ignore[assignment]
            message: dict[str, Any] = {"role": "assistant", "content": None, "tool_calls": [call]}
            output, finish = len(json.dumps(call).split()), "tool_calls"
        else:
            output = min(self.output_tokens, cap)
            message = {"role": "assistant", "content": " ".join(["word"] * output)}
            finish = "stop" if output == self.output_tokens else "length"
        prompt = prompt_tokens(body)
        usage = {
            "prompt_tokens": prompt,
            "completion_tokens": output,
            "total_tokens": prompt + output,
        }
        return message, usage, finish

    def chunks(self, body: dict[str, Any]) -> Iterator[dict[str, Any]]:
        message, usage, finish = self.reply(body)
        base = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 0}
        base["model"] = body.get("model", "")
        delta: dict[str, Any] = {"role": "assistant", "content": ""}
        yield {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
        if message.get("tool_calls"):
            calls = [{"index": 0, **message["tool_calls"][0]}]
            delta = {"tool_calls": calls}
            yield {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
        else:
            for word in (message["content"] or "").split():
                delta = {"content": word + " "}
                yield {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
        yield {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]}
        if (body.get("stream_options") or {}).get("include_usage"):
            yield {**base, "choices": [], "usage": usage}

    def completion(self, body: dict[str, Any]) -> dict[str, Any]:
        message, usage, finish = self.reply(body)
        self.usages.append(usage)
        choice = {"index": 0, "message": message, "finish_reason": finish}
        return {
            "id": "chatcmpl-fake",
            "object": "chat.completion",
            "created": 0,
            "model": body.get("model", ""),
            "choices": [choice],
            "usage": usage,
        }

    @property
    def reported_tokens(self) -> int:
        return sum(u["total_tokens"] for u in self.usages)

    def reported_cost(self, model: str) -> Decimal:
        """What the reported usage costs at the price catalog's figure, call by call."""
        catalog = PriceCatalog()
        nanos = sum(
            catalog.cost_nanos(model, ModelUsage(u["prompt_tokens"], u["completion_tokens"]))
            for u in self.usages
        )
        return nanos_to_usd(nanos)


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        return

    def do_POST(self) -> None:
        fake = self.server.fake
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if not self.path.endswith("/chat/completions"):
            self.send_error(404)
            return
        if body.get("stream"):
            self._stream(fake, body)
        else:
            payload = json.dumps(fake.completion(body)).encode()
            fake.requests.append(body)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

    def _stream(self, fake: FakeOpenAI, body: dict[str, Any]) -> None:
        chunks = list(fake.chunks(body))
        fake.requests.append(body)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        try:
            for i, chunk in enumerate(chunks):
                if "usage" in chunk:
                    fake.usages.append(chunk["usage"])  # reported: the client receives it
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.flush()
                if i == 1 and fake.hold_stream:
                    fake.stream_started.set()
                    fake.release_stream.wait(30)
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            return  # the client went away mid-stream


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    fake: FakeOpenAI


class FakeOpenAIServer:
    """`with FakeOpenAIServer(FakeOpenAI(...)) as fake:` serves on 127.0.0.1:<free port>."""

    def __init__(self, fake: FakeOpenAI) -> None:
        self.fake = fake
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.fake = fake
        fake.url = f"http://127.0.0.1:{self._server.server_address[1]}/v1"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> FakeOpenAI:
        self._thread.start()
        return self.fake

    def __exit__(self, *exc: object) -> None:
        self.fake.release_stream.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)


async def assert_ledger_is_the_report(
    budget: BudgetClient, run_id: str, fake: FakeOpenAI, model: str
) -> None:
    """Σ consumed tokens and cost equal what the fake reported (cost at the catalog's price);
    nothing is held."""
    run = await budget.get_run(run_id)
    tokens, cost = run.status(Dimension.TOKENS), run.status(Dimension.COST)
    assert (tokens.consumed, tokens.held) == (fake.reported_tokens, 0)
    assert (cost.consumed, cost.held) == (fake.reported_cost(model), 0)


async def held_then_cancelled(
    budget: BudgetClient, run_id: str, fake: FakeOpenAI, stream: Coroutine[Any, Any, None]
) -> int:
    """Runs `stream` (which reads a held stream) until the fake has sent its first chunk, reads
    the tokens the run holds then, cancels it and waits for it to end; returns what was held."""
    task = asyncio.create_task(stream)
    await asyncio.to_thread(fake.stream_started.wait, 30)
    held = (await budget.get_run(run_id)).status(Dimension.TOKENS).held
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    return int(held)
