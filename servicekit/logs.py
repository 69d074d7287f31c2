"""Log lines with request id, tenant, method, code and duration (never content or secrets):
JSON for machines, compact text for a person at a terminal."""

from __future__ import annotations

import contextvars
import hashlib
import json
import logging
import random
import re
import sys
import time
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from servicekit.settings import Env

request_id_var: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="")
# When the caller's x-request-id was not of a safe shape: a short SHA-256 prefix of it, so
# their id can still be matched to our lines without the value (maybe a secret) being logged.
sent_request_id_var: contextvars.ContextVar[str] = contextvars.ContextVar(
    "request_id_sent_sha256", default=""
)
# A UUID, trace id or other hex/dash id of at most 64 characters, or a ULID: nothing a
# credential looks like, and bounded.
_SAFE_REQUEST_ID = re.compile(r"[0-9A-Fa-f-]{1,64}|[0-9A-HJKMNP-TV-Za-hjkmnp-tv-z]{26}")
SENT_DIGEST_HEX = 12


def new_request_id() -> str:
    # A log correlation id, not a secret: no system call per RPC (uuid4 reads os.urandom).
    return f"{random.getrandbits(128):032x}"


def set_request_id(sent: str | None) -> None:
    """The id this call's log lines carry: the caller's x-request-id when it has a safe shape,
    else a new one, beside a SHA-256 prefix of what was sent (never the value itself)."""
    if sent and _SAFE_REQUEST_ID.fullmatch(sent):
        request_id_var.set(sent)
        sent_request_id_var.set("")
        return
    request_id_var.set(new_request_id())
    digest = hashlib.sha256(sent.encode("utf-8", "replace")).hexdigest() if sent else ""
    sent_request_id_var.set(digest[:SENT_DIGEST_HEX])


# An error's text in a log line is cut here: a message long enough to need more is a bug.
ERROR_TEXT_CHARS = 600


def error_text(exc: BaseException) -> str:
    """An exception for a log line: its class, SQLSTATE and message, bounded. A database
    error's message names objects, not row values (its DETAIL, which may quote a key, is left
    out), so a failure is diagnosable from the log without leaking content."""
    state = getattr(exc, "sqlstate", None)
    head = type(exc).__name__ + (f" [{state}]" if isinstance(state, str) else "")
    message = str(exc).strip()
    return (f"{head}: {message}" if message else head)[:ERROR_TEXT_CHARS]


def _correlation() -> dict[str, str]:
    fields = {"request_id": request_id_var.get()} if request_id_var.get() else {}
    if sent_request_id_var.get():
        fields["request_id_sent_sha256"] = sent_request_id_var.get()
    return fields


_RESERVED = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    """One JSON object per line; extra= fields are merged in."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        entry.update(_correlation())
        for key, value in vars(record).items():
            if key not in _RESERVED and not key.startswith("_"):
                entry[key] = value
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


class TextFormatter(logging.Formatter):
    """`12:00:01 info  migration applied  migration=budget/0001_schema`: one line a person reads
    between the console lines; the same fields as the JSON, timestamps in local time."""

    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%H:%M:%S", time.localtime(record.created))
        line = f"{stamp} {record.levelname.lower():<5} {record.getMessage()}"
        fields: dict[str, object] = dict(_correlation())
        fields.update(
            (key, value)
            for key, value in vars(record).items()
            if key not in _RESERVED and not key.startswith("_")
        )
        if fields:
            line += "  " + " ".join(f"{key}={_text(value)}" for key, value in fields.items())
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def _text(value: object) -> str:
    text = str(value)
    return json.dumps(text) if not text or any(c.isspace() or c == '"' for c in text) else text


FORMATS = ("auto", "json", "text")


def log_format(env: Env, stream: TextIO | None = None) -> str:
    """RATION_LOG_FORMAT: `json` or `text`; `auto` (the default) is text when stderr is a
    terminal and JSON otherwise (a pipe, a file, a log collector)."""
    chosen = env.choice("RATION_LOG_FORMAT", "auto", FORMATS)
    if chosen != "auto":
        return chosen
    stream = sys.stderr if stream is None else stream
    return "text" if stream.isatty() else "json"


def configure(level: str = "INFO", format: str = "json") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(TextFormatter() if format == "text" else JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # pgserver logs every pg_ctl command line at INFO.
    logging.getLogger("pgserver").setLevel(logging.WARNING)


def say(line: str) -> None:
    """One console line for people and supervisors (not a log record), written with a single
    write: worker processes share their supervisor's stdout, and with PYTHONUNBUFFERED print()
    writes the text and its newline separately, so two workers' lines could run together."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()
