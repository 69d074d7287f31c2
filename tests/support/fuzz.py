"""Hostile requests for every RPC, built from the proto descriptors, and the verdict on each
answer: its status code, its ErrorInfo, the tables it changed, and the server's health."""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, cast

import asyncpg
import grpc
from google.protobuf import message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor, ServiceDescriptor
from google.protobuf.message import Message
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from tests.support.errors import decode
from tests.support.fingerprints import changed_tables, fingerprint
from tests.support.health import SERVING, health_status
from tests.support.postgres import cloned_database
from tests.support.servers import ThreadedServer

# Codes a served RPC may answer (DESIGN 11); never INTERNAL, UNKNOWN or a hang.
DOCUMENTED_CODES = frozenset(
    {
        grpc.StatusCode.OK,
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.NOT_FOUND,
        grpc.StatusCode.ALREADY_EXISTS,
        grpc.StatusCode.FAILED_PRECONDITION,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.ABORTED,
        grpc.StatusCode.UNAUTHENTICATED,
        grpc.StatusCode.PERMISSION_DENIED,
    }
)
INT_RANGES = {
    FieldDescriptor.TYPE_INT32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_SINT32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_SFIXED32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_INT64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_SINT64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_SFIXED64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_UINT32: (0, 2**32 - 1),
    FieldDescriptor.TYPE_FIXED32: (0, 2**32 - 1),
    FieldDescriptor.TYPE_UINT64: (0, 2**64 - 1),
    FieldDescriptor.TYPE_FIXED64: (0, 2**64 - 1),
}
# Serialized requests stay around the 4 MiB message limit at most: just past it is a case.
MAX_REQUEST_BYTES = 5 * 1024 * 1024

HOSTILE_TEXT = (
    "", " ", "\x00", "a\x00b", "\x01\x02\x1f\x7f", "\t\n\r", "..", "../../etc/passwd",
    "a/../b", "a//b", "/", "\u202eevil", "\ufeff", "e\u0301", "\U0001f389", "\U0010ffff",
    "'; DROP TABLE budget.runs; --", "%s%n%x", "${jndi:x}", "*", "**", "[a-z]", "\\", "\"",
    "x" * 129, "x" * 257, "y" * 4097, "NaN", "-1", "9" * 40,
)  # fmt: skip


def hostile_strings() -> st.SearchStrategy[str]:
    """Short arbitrary text, known-nasty values, and long runs of one (multi-byte) character."""
    return st.one_of(
        st.text(st.characters(codec="utf-8"), max_size=40),
        st.sampled_from(HOSTILE_TEXT),
        st.builds(
            lambda c, n: c * n,
            st.sampled_from(["a", "é", "\U0001f600", "\x00", " "]),
            st.sampled_from([65, 256, 1025, 4097, 65537, 70_000]),
        ),
    )


EDGES = (-1, 0, 1, 2**31 - 1, 2**31, -(2**31), 2**53 + 1, 10**15, 10**15 + 1, 10**18)


def hostile_ints(low: int, high: int, plausible: Sequence[int] = ()) -> st.SearchStrategy[int]:
    """The type's extremes and usual overflow edges, small numbers, and anything in range."""
    extremes = [v for v in (low, high, *EDGES) if low <= v <= high]
    return st.one_of(
        st.sampled_from([*plausible, *extremes]),
        st.integers(max(low, -3), min(high, 200)),
        st.integers(low, high),
    )


@dataclass(frozen=True)
class Hints:
    """Values of real objects, by field name, so that requests also get past the validators
    and reach the stores."""

    strings: dict[str, Sequence[str]] = field(default_factory=dict)
    ints: dict[str, Sequence[int]] = field(default_factory=dict)


def _plausible(fd: FieldDescriptor, hints: Hints) -> st.SearchStrategy[Any]:
    """A value a well-behaved client might send."""
    if fd.type == FieldDescriptor.TYPE_STRING:
        if fd.name == "request_id":
            # Mostly fresh (the call takes effect); one in 16 reuses an id (replay or reuse).
            return st.uuids().map(lambda u: "fuzz-reused-id" if u.hex[-1] == "7" else u.hex)
        return st.sampled_from(hints.strings.get(fd.name) or ["fz", "fz-1", "a b"])
    if fd.type == FieldDescriptor.TYPE_ENUM:
        assert fd.enum_type is not None
        return st.sampled_from([v.number for v in fd.enum_type.values if v.number] or [0])
    if fd.type in INT_RANGES:
        known = hints.ints.get(fd.name)
        return st.sampled_from(known) if known else st.integers(0, 100)
    return _hostile(fd, hints)


def _hostile(fd: FieldDescriptor, hints: Hints) -> st.SearchStrategy[Any]:
    """Any value the field's type can carry, the nasty ones often."""
    if fd.type == FieldDescriptor.TYPE_STRING:
        return hostile_strings()
    if fd.type == FieldDescriptor.TYPE_BYTES:
        return st.binary(max_size=64)
    if fd.type == FieldDescriptor.TYPE_BOOL:
        return st.booleans()
    if fd.type in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        return st.floats(width=32 if fd.type == FieldDescriptor.TYPE_FLOAT else 64)
    if fd.type == FieldDescriptor.TYPE_ENUM:
        assert fd.enum_type is not None
        known_numbers = [v.number for v in fd.enum_type.values]
        return st.one_of(st.sampled_from(known_numbers), hostile_ints(-(2**31), 2**31 - 1))
    low, high = INT_RANGES[fd.type]
    return hostile_ints(low, high, hints.ints.get(fd.name, ()))


def hostile_requests(cls: type[Message], hints: Hints) -> st.SearchStrategy[Message]:
    """Requests from plausible (every field as a client would send it) through mostly
    plausible (a few fields hostile) to entirely hostile, so that both the validators and the
    code behind them are exercised."""
    return st.sampled_from([0.0, 0.0, 0.05, 0.1, 0.3, 1.0]).flatmap(
        lambda hostility: hostile_messages(cls, hints, hostility)
    )


@st.composite
def hostile_messages(
    draw: st.DrawFn, cls: type[Message], hints: Hints, hostility: float = 1.0, depth: int = 0
) -> Message:
    """A message of `cls`: each field absent or set, with probability `hostility` to an
    arbitrary or nasty value (else a plausible one); repeated fields empty, short or
    oversized; unknown enum numbers; nested messages down to a bounded depth."""
    message = cls()
    # Hypothesis favours boundary values, which would make "rare" choices common: the choices
    # between plausible and hostile, absent and present, come from a Random seeded by a draw.
    chance = random.Random(draw(st.integers(0, 2**32 - 1)))
    # The stubs type DESCRIPTOR as a union with upb's class, which has the same interface.
    descriptor = cast(Descriptor, cls.DESCRIPTOR)
    for fd in descriptor.fields:
        hostile = chance.random() < hostility
        if chance.random() < (1 / 3 if hostile else 1 / 20):
            continue  # absent: required fields too, now and then

        def scalar(fd: FieldDescriptor, hostile: bool = hostile) -> st.SearchStrategy[Any]:
            return _hostile(fd, hints) if hostile else _plausible(fd, hints)

        entry_type = fd.message_type
        if entry_type is not None and entry_type.GetOptions().map_entry:
            key_fd, value_fd = entry_type.fields_by_name["key"], entry_type.fields_by_name["value"]
            most = draw(st.sampled_from([3, 3, 40])) if hostile else 2
            entries = draw(st.dictionaries(scalar(key_fd), scalar(value_fd), max_size=most))
            getattr(message, fd.name).update(entries)
            continue
        if fd.message_type is not None:
            if depth >= 3:
                continue
            element_cls = message_factory.GetMessageClass(fd.message_type)
            element: st.SearchStrategy[Any] = hostile_messages(
                element_cls, hints, hostility, depth + 1
            )
        else:
            element = scalar(fd)
        if fd.is_repeated:
            values = draw(st.lists(element, max_size=4, unique_by=None if hostile else str))
            if values and hostile and chance.random() < 1 / 4:  # sometimes far too many
                copies = draw(st.sampled_from([33, 101, 1001, 1500]))
                one = values[0]
                size = len(one.SerializeToString() if fd.message_type else str(one).encode())
                copies = min(copies, MAX_REQUEST_BYTES // max(1, size))
                values = values[:1] * copies
            getattr(message, fd.name).extend(values)
        elif fd.message_type is not None:
            getattr(message, fd.name).CopyFrom(draw(element))
        else:
            setattr(message, fd.name, draw(element))
    return message


@st.composite
def mangled_bytes(draw: st.DrawFn, cls: type[Message], hints: Hints) -> bytes:
    """Random bytes, or a real message's bytes with some flipped, cut or spliced."""
    if draw(st.booleans()):
        return draw(st.binary(max_size=256))
    data = bytearray(draw(hostile_requests(cls, hints)).SerializeToString()[:4096])
    for _ in range(draw(st.integers(1, 4))):
        if not data:
            break
        at = draw(st.integers(0, len(data) - 1))
        action = draw(st.sampled_from(["flip", "cut", "insert"]))
        if action == "flip":
            data[at] = draw(st.integers(0, 255))
        elif action == "cut":
            del data[at:]
        else:
            data[at:at] = draw(st.binary(min_size=1, max_size=8))
    return bytes(data)


@dataclass
class Verdict:
    """What one fuzzed call answered and wrote."""

    code: grpc.StatusCode
    reason: str
    domain: str
    changed: list[str]
    message: str = ""


@dataclass(frozen=True)
class Target:
    """A service under fuzzing: its RPCs (from the descriptor, so new ones are covered), the
    schema its refusals must leave untouched, and its error domain."""

    service: ServiceDescriptor
    schema: str
    domain: str
    # (method, code) → the API documents that this refusal records something.
    records_refusal: Callable[[str, grpc.StatusCode], bool] = lambda method, code: False
    # Process bookkeeping the server writes in the background, whatever the calls do.
    background_tables: frozenset[str] = frozenset()
    unserved: frozenset[str] = frozenset()

    @property
    def methods(self) -> list[str]:
        return sorted(m.name for m in self.service.methods)

    def request_class(self, method: str) -> type[Message]:
        return message_factory.GetMessageClass(self.service.methods_by_name[method].input_type)

    def _call(self, channel: grpc.aio.Channel, method: str, raw: bool) -> Any:
        descriptor = self.service.methods_by_name[method]
        path = f"/{self.service.full_name}/{method}"
        codec: dict[str, Any] = {}
        if not raw:
            response = message_factory.GetMessageClass(descriptor.output_type)
            codec = {
                "request_serializer": lambda m: m.SerializeToString(),
                "response_deserializer": response.FromString,
            }
        if descriptor.server_streaming:
            return channel.unary_stream(path, **codec)
        return channel.unary_unary(path, **codec)

    async def with_unserved(self, channel: grpc.aio.Channel) -> Target:
        """This target, knowing which RPCs the server does not serve yet (UNIMPLEMENTED to an
        empty request): only those may answer UNIMPLEMENTED."""
        found = set()
        for method in self.methods:
            call = self._call(channel, method, raw=False)(self.request_class(method)(), timeout=10)
            try:
                await asyncio.wait_for(call.read() if hasattr(call, "read") else call, 2)
            except grpc.aio.AioRpcError as error:
                if error.code() == grpc.StatusCode.UNIMPLEMENTED:
                    found.add(method)
            except TimeoutError:
                pass  # a stream that stays open is served
            call.cancel()
        return replace(self, unserved=frozenset(found))

    async def send(
        self, channel: grpc.aio.Channel, db: asyncpg.Connection, method: str, request: Any
    ) -> Verdict:
        """Sends a message (or, given bytes, those bytes as they are) and reports the answer
        and the tables it changed. A stream is read for as long as events keep coming, then
        cancelled: it follows its run live, so open means serving."""
        call = self._call(channel, method, raw=isinstance(request, bytes))
        before = await fingerprint(db, self.schema)
        code, reason, domain, message = grpc.StatusCode.OK, "", "", ""
        try:
            if self.service.methods_by_name[method].server_streaming:
                stream = call(request, timeout=60)
                try:
                    while await asyncio.wait_for(stream.read(), 0.25) is not grpc.aio.EOF:
                        pass
                except TimeoutError:
                    stream.cancel()
                else:
                    await stream
            else:
                await call(request, timeout=60)
        except grpc.aio.AioRpcError as error:
            details = decode(error)
            code, reason, domain = details.code, details.reason, details.domain
            message = details.message
        changed = changed_tables(before, await fingerprint(db, self.schema))
        changed = [t for t in changed if t not in self.background_tables]
        return Verdict(code, reason, domain, changed, message)

    async def judge(self, method: str, verdict: Verdict, channel: grpc.aio.Channel) -> None:
        """A documented code (UNIMPLEMENTED only for an RPC not served yet) with its ErrorInfo,
        nothing written by a refusal unless documented, and the server still SERVING."""
        code = verdict.code
        if method in self.unserved:
            assert code == grpc.StatusCode.UNIMPLEMENTED, f"{method}: {verdict}"
        else:
            assert code in DOCUMENTED_CODES, f"{method}: {verdict}"
        # gRPC itself refuses a request over the message size limit, without ErrorInfo (but a
        # refusal too large for the client's metadata limit would be lost: not allowed).
        transport_limit = code == grpc.StatusCode.RESOURCE_EXHAUSTED and not verdict.reason
        if transport_limit:
            assert "message larger than max" in verdict.message, verdict
        if code not in (grpc.StatusCode.OK, grpc.StatusCode.UNIMPLEMENTED) and not transport_limit:
            assert (verdict.domain, bool(verdict.reason)) == (self.domain, True), verdict
        if code != grpc.StatusCode.OK and not self.records_refusal(method, code):
            assert verdict.changed == [], f"{method} refused ({verdict.reason}) but wrote"
        assert await health_status(channel) == SERVING


# Examples per RPC; the fixtures are module-scoped servers, reused on purpose across examples.
FUZZ = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
)


@dataclass
class Served:
    server: ThreadedServer
    url: str
    target: Target


@contextlib.contextmanager
def serve(
    kind: str, target: Target, pg_server_url: str, template_database: str, **env: str
) -> Iterator[Served]:
    """A service on its own cloned database, in a thread, with `target` told which RPCs it
    leaves unserved."""
    with cloned_database(pg_server_url, template_database, "ration_fz") as url:
        server = ThreadedServer(kind, url, **env).start()

        async def setup() -> Target:
            async with grpc.aio.insecure_channel(server.address) as channel:
                return await target.with_unserved(channel)

        try:
            yield Served(server, url, asyncio.run(setup()))
        finally:
            server.stop()


@contextlib.asynccontextmanager
async def connected(served: Served) -> AsyncIterator[asyncpg.Connection]:
    connection = await asyncpg.connect(served.url)
    try:
        yield connection
    finally:
        await connection.close()
