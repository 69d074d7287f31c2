"""A fake model provider on loopback: OpenAI chat completions and responses, Anthropic messages.

It speaks the providers' HTTP shapes (JSON bodies, SSE streams with usage chunks) so the real
SDKs run unchanged against it, and it counts every request it receives. It bills like a provider:
its own prompt count (o200k_base with OpenAI's chat framing; for Anthropic the same without the
framing, so below the client's scaled estimate) and `reply_tokens` output tokens, capped by the
request's max tokens. `stall` holds a stream after its first content chunk until set, so a test
can cancel mid-stream; `fail_with` answers the next request with that HTTP status.

    async with FakeLLM() as fake:
        AsyncOpenAI(base_url=fake.openai_url, api_key="x")
        AsyncAnthropic(base_url=fake.anthropic_url, api_key="x")
"""

from __future__ import annotations

import asyncio
import itertools
import json
import socket
import time
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from typing import Any, Self

from aiohttp import web

from servicekit.encodings import build_encoding

_ENCODING = build_encoding("o200k_base")
_ids = itertools.count(1)


def _tokens(value: Any) -> int:
    if value is None:
        return 0
    if isinstance(value, str):
        return len(_ENCODING.encode_ordinary(value))
    if isinstance(value, list):
        return sum(_tokens(part) for part in value)
    if isinstance(value, dict) and isinstance(value.get("text"), str):
        return _tokens(value["text"])
    return _tokens(json.dumps(value, sort_keys=True))


def _framed(messages: Iterable[dict[str, Any]]) -> int:
    """OpenAI's published chat framing: 3 per message, 1 per name, 3 to prime the reply."""
    total = 3
    for message in messages:
        total += 3 + sum(_tokens(v) for v in message.values()) + (1 if "name" in message else 0)
    return total


@dataclass
class Received:
    path: str
    body: dict[str, Any]


@dataclass
class Billed:
    input_tokens: int
    output_tokens: int


class FakeLLM:
    """The fake provider (see the module docstring)."""

    def __init__(self, reply_tokens: int = 20) -> None:
        self.reply_tokens = reply_tokens
        self.received: list[Received] = []
        self.billed: list[Billed] = []
        self.stall: asyncio.Event | None = None
        self.stalled = asyncio.Event()  # set when a stream waits on `stall`
        self.fail_with: int | None = None
        self._runner: web.AppRunner | None = None
        self.port = 0

    # ---- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> Self:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/v1/responses", self._responses)
        app.router.add_post("/v1/messages", self._messages)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.bind(("127.0.0.1", 0))
        self.port = listener.getsockname()[1]
        await web.SockSite(self._runner, listener).start()
        return self

    async def stop(self) -> None:
        if self.stall is not None:
            self.stall.set()
        if self._runner is not None:
            await self._runner.cleanup()

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def openai_url(self) -> str:
        return f"{self.base_url}/v1"

    @property
    def anthropic_url(self) -> str:
        return self.base_url

    @property
    def requests(self) -> int:
        return len(self.received)

    @property
    def billed_tokens(self) -> int:
        return sum(b.input_tokens + b.output_tokens for b in self.billed)

    # ---- shared -------------------------------------------------------------------------------

    async def _receive(self, request: web.Request) -> tuple[dict[str, Any], web.Response | None]:
        body = await request.json()
        self.received.append(Received(request.path, body))
        if self.fail_with is not None:
            status, self.fail_with = self.fail_with, None
            error = {"error": {"type": "server_error", "message": "injected failure"}}
            return body, web.json_response(error, status=status)
        return body, None

    def _bill(self, input_tokens: int, limit: int | None) -> Billed:
        output = self.reply_tokens if limit is None else min(self.reply_tokens, limit)
        billed = Billed(input_tokens, output)
        self.billed.append(billed)
        return billed

    def _words(self, count: int) -> list[str]:
        return [" tok"] * count

    async def _sse(self, request: web.Request, events: AsyncIterator[str]) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        try:
            async for event in events:
                await response.write(event.encode())
            await response.write_eof()
        except ConnectionResetError:  # the client went away mid-stream (a cancelled reader)
            pass
        return response

    async def _maybe_stall(self, index: int) -> None:
        if index == 1 and self.stall is not None:
            self.stalled.set()
            await self.stall.wait()

    # ---- OpenAI chat completions --------------------------------------------------------------

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body, failure = await self._receive(request)
        if failure is not None:
            return failure
        limit = body.get("max_completion_tokens", body.get("max_tokens"))
        billed = self._bill(_framed(body["messages"]), limit)
        usage = {
            "prompt_tokens": billed.input_tokens,
            "completion_tokens": billed.output_tokens,
            "total_tokens": billed.input_tokens + billed.output_tokens,
        }
        ident, created, model = f"chatcmpl-{next(_ids)}", int(time.time()), body["model"]
        finish = "length" if billed.output_tokens == limit else "stop"
        words = self._words(billed.output_tokens)
        if not body.get("stream"):
            message = {"role": "assistant", "content": "".join(words)}
            choice = {"index": 0, "message": message, "finish_reason": finish}
            reply = {"id": ident, "object": "chat.completion", "created": created}
            return web.json_response(reply | {"model": model, "choices": [choice], "usage": usage})
        with_usage = (body.get("stream_options") or {}).get("include_usage", False)

        async def events() -> AsyncIterator[str]:
            base = {"id": ident, "object": "chat.completion.chunk", "created": created}
            base["model"] = model
            for index, word in enumerate(words):
                await self._maybe_stall(index)
                delta = {"role": "assistant", "content": word}
                choice = {"index": 0, "delta": delta, "finish_reason": None}
                yield f"data: {json.dumps(base | {'choices': [choice]})}\n\n"
            last = {"index": 0, "delta": {}, "finish_reason": finish}
            yield f"data: {json.dumps(base | {'choices': [last]})}\n\n"
            if with_usage:
                yield f"data: {json.dumps(base | {'choices': [], 'usage': usage})}\n\n"
            yield "data: [DONE]\n\n"

        return await self._sse(request, events())

    # ---- OpenAI responses ---------------------------------------------------------------------

    async def _responses(self, request: web.Request) -> web.StreamResponse:
        body, failure = await self._receive(request)
        if failure is not None:
            return failure
        given = body.get("input")
        items: list[dict[str, Any]] = (
            [{"role": "user", "content": given}] if isinstance(given, str) else list(given or ())
        )
        if body.get("instructions"):
            items = [{"role": "system", "content": body["instructions"]}, *items]
        billed = self._bill(_framed(items), body.get("max_output_tokens"))
        words = self._words(billed.output_tokens)
        ident = f"resp_{next(_ids)}"
        usage = {
            "input_tokens": billed.input_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": billed.output_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": billed.input_tokens + billed.output_tokens,
        }

        def response(status: str, text: str, with_usage: bool) -> dict[str, Any]:
            content = {"type": "output_text", "text": text, "annotations": []}
            message: dict[str, Any] = {"type": "message", "id": f"msg_{ident}"}
            message["status"] = status
            message |= {"role": "assistant", "content": [content] if text else []}
            return {
                "id": ident,
                "object": "response",
                "created_at": int(time.time()),
                "model": body["model"],
                "status": status,
                "output": [message] if text else [],
                "parallel_tool_calls": True,
                "tool_choice": "auto",
                "tools": [],
                "usage": usage if with_usage else None,
            }

        if not body.get("stream"):
            return web.json_response(response("completed", "".join(words), True))

        async def events() -> AsyncIterator[str]:
            seq = itertools.count()

            def event(kind: str, data: dict[str, Any]) -> str:
                data = {"type": kind, "sequence_number": next(seq)} | data
                return f"event: {kind}\ndata: {json.dumps(data)}\n\n"

            yield event("response.created", {"response": response("in_progress", "", False)})
            for index, word in enumerate(words):
                await self._maybe_stall(index)
                yield event(
                    "response.output_text.delta",
                    {"item_id": f"msg_{ident}", "output_index": 0, "content_index": 0}
                    | {"delta": word, "logprobs": []},
                )
            done = response("completed", "".join(words), True)
            yield event("response.completed", {"response": done})

        return await self._sse(request, events())

    # ---- Anthropic messages -------------------------------------------------------------------

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        body, failure = await self._receive(request)
        if failure is not None:
            return failure
        prompt = sum(_tokens(m.get("content")) for m in body["messages"]) + _tokens(
            body.get("system")
        )
        billed = self._bill(prompt, body["max_tokens"])
        words = self._words(billed.output_tokens)
        ident, model = f"msg_{next(_ids)}", body["model"]
        stop = "max_tokens" if billed.output_tokens == body["max_tokens"] else "end_turn"
        usage = {"input_tokens": billed.input_tokens, "output_tokens": billed.output_tokens}
        message: dict[str, Any] = {
            "id": ident,
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [{"type": "text", "text": "".join(words)}],
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": usage,
        }
        if not body.get("stream"):
            return web.json_response(message)

        async def events() -> AsyncIterator[str]:
            def event(kind: str, data: dict[str, Any]) -> str:
                return f"event: {kind}\ndata: {json.dumps({'type': kind} | data)}\n\n"

            start_usage = {"input_tokens": billed.input_tokens, "output_tokens": 1}
            started = message | {"content": [], "stop_reason": None, "usage": start_usage}
            yield event("message_start", {"message": started})
            block = {"type": "text", "text": ""}
            yield event("content_block_start", {"index": 0, "content_block": block})
            for index, word in enumerate(words):
                await self._maybe_stall(index)
                delta = {"type": "text_delta", "text": word}
                yield event("content_block_delta", {"index": 0, "delta": delta})
            yield event("content_block_stop", {"index": 0})
            final = {"output_tokens": billed.output_tokens}
            stopped = {"stop_reason": stop, "stop_sequence": None}
            yield event("message_delta", {"delta": stopped, "usage": final})
            yield event("message_stop", {})

        return await self._sse(request, events())
