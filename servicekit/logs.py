"""Log lines with request id, tenant, method, code and duration (never content or secrets):
JSON for machines, compact text for a person at a terminal."""

from __future__ import annotations

import contextvars
import json
import logging
import sys
import time
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from servicekit.settings import Env

request_id_var: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="")

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
        request_id = request_id_var.get()
        if request_id:
            entry["request_id"] = request_id
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
        fields = {"request_id": request_id_var.get()} if request_id_var.get() else {}
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
