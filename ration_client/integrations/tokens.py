"""Prompt tokens before a model call, counted locally with tiktoken (nothing is downloaded).

OpenAI models: the model's own encoding (tiktoken's model table, o200k_base when it does not
know the name) and OpenAI's published chat framing (3 tokens per message, 1 more for a `name`,
3 to prime the reply). Tool and response-format schemas, images and other non-text parts are
counted as the JSON text they are sent as: an approximation, so keep a margin in the budget.

Anthropic models: Anthropic publishes no tokenizer; the count is the o200k_base count scaled by
`ANTHROPIC_FACTOR` (Claude's tokenizer yields more tokens than o200k_base on most text), plus the
same framing. It is an estimate; the provider's reported usage is what is consumed, and a call
that used more than was held is recorded as an overrun, never lost."""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Iterable, Mapping
from typing import Any

import tiktoken
from tiktoken.model import encoding_name_for_model

from servicekit.encodings import ENCODINGS, build_encoding

__all__ = [
    "ANTHROPIC_FACTOR",
    "count_anthropic_prompt",
    "count_openai_input",
    "count_openai_messages",
    "count_text",
]

PER_MESSAGE = 3
PER_NAME = 1
REPLY_PRIMING = 3
ANTHROPIC_FACTOR = 1.25


@functools.cache
def _encoding(name: str) -> tiktoken.Encoding:
    return build_encoding(name)


def encoding_for(model: str) -> tiktoken.Encoding:
    """The model's tiktoken encoding when it is one we ship, else o200k_base."""
    try:
        name = encoding_name_for_model(model)
    except KeyError:
        name = "o200k_base"
    return _encoding(name if name in ENCODINGS else "o200k_base")


def count_text(text: str, model: str = "") -> int:
    """Tokens of `text` in the model's encoding (special-token strings count as plain text)."""
    return len(encoding_for(model).encode_ordinary(text))


def _content_tokens(value: Any, model: str) -> int:
    """A message field: text counts as text; a list of parts counts each part's text, and any
    other part (image, audio, file, tool call) as its JSON."""
    if value is None:
        return 0
    if isinstance(value, str):
        return count_text(value, model)
    if isinstance(value, Mapping):
        text = value.get("text")
        if isinstance(text, str) and set(value) <= {"type", "text", "cache_control"}:
            return count_text(text, model)
        return count_text(json.dumps(value, default=str, sort_keys=True), model)
    if isinstance(value, Iterable):
        return sum(_content_tokens(part, model) for part in value)
    return count_text(str(value), model)


def _message_tokens(message: Any, model: str) -> int:
    fields = message if isinstance(message, Mapping) else vars(message)
    tokens = PER_MESSAGE
    for key, value in fields.items():
        tokens += _content_tokens(value, model)
        if key == "name":
            tokens += PER_NAME
    return tokens


def count_openai_messages(
    messages: Iterable[Any], model: str, *, tools: Any = None, extra: Any = None
) -> int:
    """Prompt tokens of a chat completion: the messages with their framing, plus the JSON of
    `tools` and `extra` (e.g. a response_format schema) when given."""
    tokens = REPLY_PRIMING + sum(_message_tokens(m, model) for m in messages)
    for schema in (tools, extra):
        if schema:
            tokens += _content_tokens(json.dumps(schema, default=str, sort_keys=True), model)
    return tokens


def count_openai_input(
    input: Any, model: str, *, instructions: str | None = None, tools: Any = None
) -> int:
    """Prompt tokens of a Responses API call: `input` (a string or a list of items), the
    instructions and the tools."""
    items = [{"role": "user", "content": input}] if isinstance(input, str) else list(input or ())
    if instructions:
        items.insert(0, {"role": "system", "content": instructions})
    return count_openai_messages(items, model, tools=tools)


def count_anthropic_prompt(
    messages: Iterable[Any], model: str, *, system: Any = None, tools: Any = None
) -> int:
    """An estimate of a Messages API prompt (see the module docstring): never below the
    o200k_base count, scaled by ANTHROPIC_FACTOR."""
    items = list(messages)
    if system:
        items.insert(0, {"role": "system", "content": system})
    base = count_openai_messages(items, "o200k_base", tools=tools)
    return math.ceil(base * ANTHROPIC_FACTOR)
