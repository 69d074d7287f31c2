"""Fail-open while the budget service is unreachable: a bounded local allowance and a journal.

`BudgetClient(on_unavailable="fail_open", fail_open=FailOpen(path, per_run=…, per_process=…))`.
When a Reserve fails with UNAVAILABLE (after the client's retries), the hold is granted locally
if the run's and the process's allowance still cover its estimate, and refused otherwise
(`FailOpenRefused`, an `Unavailable`). What such a call consumed is appended to the journal (one
JSON line, fsync'd) with the request id its Consume will carry, before anything is sent; the same
happens to a Consume of a server hold that cannot reach the service. Journaled consumes are
replayed, each with its own request id, as soon as a Reserve succeeds again (or by
`BudgetClient.replay_journal()`): the service applies a request id once (it keeps them for
RATION_IDEMPOTENCY_RETENTION_HOURS, 24 h by default), so a replay repeated after a crash — the
consume was sent but its "replayed" line never written — records nothing twice.

The allowance bounds what is spent without the service knowing: open local holds plus
journaled usage not yet replayed, per run and for the process. Every grant, refusal, journal
line and replay is counted in `FailOpen.counters` and logged on the `ration_client.degraded`
logger. One journal file per process: two processes appending to one file is not supported."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc

from ration_client.errors import Unavailable
from ration_client.views import Amounts

__all__ = ["DegradedCounters", "FailOpen", "FailOpenRefused", "JournalEntry"]

log = logging.getLogger("ration_client.degraded")

_FIELDS = ("tokens", "cost_nanos", "tool_calls", "retries")


class FailOpenRefused(Unavailable):
    """The service is unreachable and the fail-open allowance does not cover this call."""

    def __init__(self, run_id: str, scope: str) -> None:
        message = f"budget service unreachable and the fail-open allowance per {scope} is spent"
        super().__init__(grpc.StatusCode.UNAVAILABLE, "FAIL_OPEN_ALLOWANCE_SPENT", message, {}, [])
        self.run_id = run_id
        self.scope = scope


@dataclass
class DegradedCounters:
    """Counts since the client started (also logged one by one)."""

    granted: int = 0  # holds granted locally while the service was unreachable
    refused: int = 0  # holds refused because the allowance was spent
    journaled: int = 0  # consumes written to the journal
    replayed: int = 0  # journaled consumes the service has now recorded
    replay_failed: int = 0  # journaled consumes the service rejected (logged, not retried)


@dataclass(frozen=True)
class JournalEntry:
    """One consume the service has not confirmed yet."""

    request_id: str
    run_id: str
    model: str
    usage: Amounts
    reservation_id: str = ""  # the server hold it settles; empty for a local grant


def _add(a: Amounts, b: Amounts, sign: int = 1) -> Amounts:
    return Amounts(**{f: getattr(a, f) + sign * getattr(b, f) for f in _FIELDS})


def _fits(used: Amounts, more: Amounts, allowance: Amounts) -> bool:
    """Within every dimension the allowance bounds (0: that dimension is not bounded)."""
    return all(
        getattr(used, f) + getattr(more, f) <= getattr(allowance, f)
        for f in _FIELDS
        if getattr(allowance, f)
    )


class FailOpen:
    """The fail-open policy of one client: its allowance, its journal and its counters.

    `per_run` and `per_process` bound each dimension they set (e.g. `Amounts(tokens=20_000,
    cost_nanos=usd("0.50"))`); a dimension left at 0 is not bounded locally, and each must bound
    at least one."""

    def __init__(self, journal: str | Path, *, per_run: Amounts, per_process: Amounts) -> None:
        for name, allowance in (("per_run", per_run), ("per_process", per_process)):
            if not any(getattr(allowance, f) for f in _FIELDS):
                raise ValueError(f"{name} must bound at least one dimension")
            if any(getattr(allowance, f) < 0 for f in _FIELDS):
                raise ValueError(f"{name} amounts must be >= 0")
        self.path = Path(journal)
        self.per_run = per_run
        self.per_process = per_process
        self.counters = DegradedCounters()
        self._used: dict[str, Amounts] = {}
        self._total = Amounts()
        self._lock = threading.Lock()
        self.waiting = 0  # journaled consumes not replayed yet
        self._settled: set[str] = set()
        for entry in self.pending():  # what a previous process left unreplayed still counts
            self._charge(entry.run_id, entry.usage)
            self.waiting += 1

    # ---- the allowance -------------------------------------------------------------------------

    def _charge(self, run_id: str, amounts: Amounts, sign: int = 1) -> None:
        self._used[run_id] = _add(self._used.get(run_id, Amounts()), amounts, sign)
        self._total = _add(self._total, amounts, sign)

    def grant(self, run_id: str, model: str, estimate: Amounts) -> None:
        """Grants `estimate` locally or raises FailOpenRefused."""
        with self._lock:
            scope = ""
            if not _fits(self._used.get(run_id, Amounts()), estimate, self.per_run):
                scope = "run"
            elif not _fits(self._total, estimate, self.per_process):
                scope = "process"
            if scope:
                self.counters.refused += 1
                log.warning(
                    "fail-open refused run=%s model=%s: %s allowance spent", run_id, model, scope
                )
                raise FailOpenRefused(run_id, scope)
            self._charge(run_id, estimate)
            self.counters.granted += 1
        log.warning("fail-open granted run=%s model=%s tokens=%d", run_id, model, estimate.tokens)

    def give_back(self, run_id: str, amounts: Amounts) -> None:
        """A local hold ended: what it held no longer counts (its usage is charged on its own)."""
        with self._lock:
            self._charge(run_id, amounts, -1)

    # ---- the journal ---------------------------------------------------------------------------

    def _append(self, record: dict[str, object]) -> None:
        line = json.dumps(record, separators=(",", ":"), sort_keys=True) + "\n"
        with self._lock:
            fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                size = os.fstat(fd).st_size
                if size and os.pread(fd, 1, size - 1) != b"\n":
                    line = "\n" + line  # a crash cut the last line short: start a new one
                os.write(fd, line.encode())
                os.fsync(fd)
            finally:
                os.close(fd)

    def journal(self, entry: JournalEntry) -> None:
        """Writes a consume to disk (fsync) before it is sent; its usage counts against the
        allowance until it is replayed."""
        usage = dataclasses.asdict(entry.usage)
        self._append(
            {"kind": "consume", "request_id": entry.request_id, "run_id": entry.run_id}
            | {"model": entry.model, "usage": usage, "reservation_id": entry.reservation_id}
        )
        with self._lock:
            self._charge(entry.run_id, entry.usage)
            self.counters.journaled += 1
            self.waiting += 1
        log.warning("journaled consume run=%s request_id=%s", entry.run_id, entry.request_id)

    def settled(self, entry: JournalEntry, *, failed: str = "") -> None:
        """The service recorded the consume (or rejected it for good: `failed` says why)."""
        with self._lock:
            if entry.request_id in self._settled:  # a replay raced the first send: one mark
                return
            self._settled.add(entry.request_id)
        record: dict[str, object] = {"kind": "replayed", "request_id": entry.request_id}
        if failed:
            record["failed"] = failed
        self._append(record)
        with self._lock:
            self._charge(entry.run_id, entry.usage, -1)
            self.waiting -= 1
            if failed:
                self.counters.replay_failed += 1
            else:
                self.counters.replayed += 1
        if failed:
            log.error("journaled consume rejected request_id=%s: %s", entry.request_id, failed)
        else:
            log.info("replayed consume run=%s request_id=%s", entry.run_id, entry.request_id)

    def _records(self) -> Iterator[dict[str, object]]:
        with contextlib.suppress(FileNotFoundError), self.path.open("rb") as lines:
            for line in lines:
                try:
                    record = json.loads(line)
                except ValueError:  # a line cut short by a crash: it was never confirmed
                    continue
                if isinstance(record, dict):
                    yield record

    def pending(self) -> list[JournalEntry]:
        """Journaled consumes with no "replayed" line, in journal order."""
        entries: dict[str, JournalEntry] = {}
        for record in self._records():
            request_id = str(record.get("request_id", ""))
            if record.get("kind") == "replayed":
                entries.pop(request_id, None)
            elif record.get("kind") == "consume" and isinstance(record.get("usage"), dict):
                usage = record["usage"]
                assert isinstance(usage, dict)
                entries[request_id] = JournalEntry(
                    request_id,
                    str(record.get("run_id", "")),
                    str(record.get("model", "")),
                    Amounts(**{f: int(usage.get(f, 0)) for f in _FIELDS}),
                    str(record.get("reservation_id", "")),
                )
        return list(entries.values())
