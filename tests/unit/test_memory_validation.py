"""Write input rules: every problem is reported at once, by field, without echoing values."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from memory_service.domain.commands import (
    AppendEntries,
    ChangeEntryStates,
    CompactMemory,
    EntryDraft,
    OrganizeMemory,
    OrganizeMode,
    ReviseEntry,
    WriteTarget,
)
from memory_service.domain.write_input_rules import (
    InputLimits,
    validate_append,
    validate_compact,
    validate_organize,
    validate_revise,
    validate_state_change,
)
from servicekit.redaction import Secret

NOW = datetime(2026, 1, 1, tzinfo=UTC)
LIMITS = InputLimits(max_entry_size_bytes=16, max_batch_entries=2)
TARGET = WriteTarget("req-1", "team/memory")
ENTRY_ID = "mem_ent_" + "0" * 32


def fields(violations: list) -> list[str]:  # type: ignore[type-arg]
    return [v.field for v in violations]


def test_a_good_append_has_no_violations() -> None:
    command = AppendEntries(TARGET, (EntryDraft("hello", tags=("a",), metadata={"k": "v"}),))
    assert validate_append(command, LIMITS, NOW) == []


def test_every_problem_of_an_append_is_reported_together() -> None:
    command = AppendEntries(
        WriteTarget("", "a/../b", expected_revision=-2),
        (
            EntryDraft("x" * 17, entry_id=ENTRY_ID),
            EntryDraft("ok", entry_id=ENTRY_ID, expires_at=NOW - timedelta(seconds=1)),
            EntryDraft(""),
        ),
        (Secret("id", "short"),),
    )
    assert fields(validate_append(command, LIMITS, NOW)) == [
        "request_id",
        "memory_ref",
        "expected_revision",
        "entries",
        "entries[0].content",
        "entries[1].expires_at",
        "entries[2].content",
        "entries[1].entry_id",
        "secrets[0].value",
    ]


def test_content_size_counts_utf8_bytes_not_characters() -> None:
    fits = AppendEntries(TARGET, (EntryDraft("é" * 8),))  # 16 bytes
    too_big = AppendEntries(TARGET, (EntryDraft("é" * 9),))  # 18 bytes, 9 characters
    assert validate_append(fits, LIMITS, NOW) == []
    (violation,) = validate_append(too_big, LIMITS, NOW)
    assert violation.description == "is 18 bytes of UTF-8; the maximum is 16"


def test_violation_descriptions_never_echo_the_secret_value() -> None:
    command = AppendEntries(TARGET, (EntryDraft("x"),), (Secret("bad id!", "s3"),))
    for violation in validate_append(command, LIMITS, NOW):
        assert "s3" not in violation.description


def test_revise_checks_the_target_id_and_the_new_content() -> None:
    command = ReviseEntry(TARGET, "nope", EntryDraft("", entry_id=ENTRY_ID), reason="r" * 257)
    assert fields(validate_revise(command, LIMITS, NOW)) == [
        "entry_id",
        "entry.entry_id",
        "entry.content",
        "reason",
    ]


def test_state_changes_need_well_formed_unique_ids() -> None:
    assert fields(validate_state_change(ChangeEntryStates(TARGET, ()), LIMITS)) == ["entry_ids"]
    twice = ChangeEntryStates(TARGET, (ENTRY_ID, ENTRY_ID, "mem_ent_x"))
    assert fields(validate_state_change(twice, LIMITS)) == ["entry_ids[1]", "entry_ids[2]"]


def test_organize_needs_a_known_mode() -> None:
    assert fields(validate_organize(OrganizeMemory(TARGET, None))) == ["mode"]
    assert validate_organize(OrganizeMemory(TARGET, OrganizeMode.DEDUPE)) == []


def test_a_real_compaction_needs_the_previewed_head_and_a_dry_run_needs_no_request_id() -> None:
    assert fields(validate_compact(CompactMemory(TARGET, dry_run=False), LIMITS)) == [
        "expected_revision"
    ]
    preview = CompactMemory(WriteTarget("", "team/memory"), dry_run=True, limit=-1)
    assert fields(validate_compact(preview, LIMITS)) == ["limit"]


SECRET = Secret("vault", "0123abcd-secret")


def test_identifiers_holding_a_request_secret_are_refused_without_the_value() -> None:
    entry_id = "mem_ent_" + "0123abcd" * 4
    hex_secret = Secret("hex", "0123abcd0123abcd")
    command = AppendEntries(
        WriteTarget(f"req-{SECRET.value}", f"team/{SECRET.value.upper()}-x"),
        (EntryDraft("x", entry_id=entry_id),),
        (SECRET, hex_secret),
    )
    # memory_ref: upper case is a different value; the entry id holds the hex one.
    violations = validate_append(command, LIMITS, NOW)
    assert fields(violations) == ["request_id", "entries[0].entry_id"]
    assert [v.description for v in violations] == [
        "must not contain the value of secrets[0]",
        "must not contain the value of secrets[1]",
    ]
    revise = ReviseEntry(
        WriteTarget("req-1", f"team/{SECRET.value}"), ENTRY_ID, EntryDraft("x"), (SECRET,)
    )
    assert fields(validate_revise(revise, LIMITS, NOW)) == ["memory_ref"]


def test_a_full_width_form_of_a_secret_in_an_identifier_is_refused() -> None:
    disguised = "".join(chr(ord(c) + 0xFEE0) if c.isalnum() else c for c in SECRET.value)
    command = AppendEntries(WriteTarget(disguised, "m"), (EntryDraft("x"),), (SECRET,))
    assert fields(validate_append(command, LIMITS, NOW)) == ["request_id"]


def test_secrets_are_capped_in_number_and_size() -> None:
    many = tuple(Secret(f"s{n}", f"value-{n:04d}") for n in range(65))
    assert fields(validate_append(AppendEntries(TARGET, (EntryDraft("x"),), many), BIG, NOW)) == [
        "secrets"
    ]
    assert validate_append(AppendEntries(TARGET, (EntryDraft("x"),), many[:64]), BIG, NOW) == []
    long = (Secret("big", "v" * 4097),)
    assert fields(validate_append(AppendEntries(TARGET, (EntryDraft("x"),), long), BIG, NOW)) == [
        "secrets[0].value"
    ]
    invisible = (Secret("zw", "abc\u200b\u200b\u200b\u200b\u200b\u200b"),)
    command = AppendEntries(TARGET, (EntryDraft("x"),), invisible)
    assert fields(validate_append(command, BIG, NOW)) == ["secrets[0].value"]


BIG = InputLimits(max_entry_size_bytes=4096, max_batch_entries=10, max_request_text_bytes=8192)


def test_the_total_text_of_a_request_is_capped() -> None:
    # Each field is within its own limit; together they are not.
    entry = EntryDraft("c" * 4000, kind="k" * 64, tags=("t" * 64,), metadata={"k": "v" * 1024})
    assert validate_append(AppendEntries(TARGET, (entry,)), BIG, NOW) == []
    (violation,) = validate_append(AppendEntries(TARGET, (entry, entry)), BIG, NOW)
    assert violation.field == "entries"
    assert violation.description.endswith("the maximum is 8192")
    secrets = (Secret("s", "x" * 4000),)
    assert fields(validate_append(AppendEntries(TARGET, (entry,), secrets), BIG, NOW)) == [
        "entries"
    ]
    revise = ReviseEntry(TARGET, ENTRY_ID, EntryDraft("c" * 4096), secrets, reason="r" * 100)
    assert fields(validate_revise(revise, BIG, NOW)) == ["entry"]


def test_forget_and_compact_check_their_secrets_and_identifiers() -> None:
    hex_secret = Secret("hex", "0123abcd0123abcd")
    forget = ChangeEntryStates(
        WriteTarget("req-1", "m"), (ENTRY_ID, "mem_ent_" + "0123abcd" * 4), "r", (hex_secret,)
    )
    assert fields(validate_state_change(forget, LIMITS)) == ["entry_ids[1]"]
    target = WriteTarget(f"req-{SECRET.value}", "m", 3)
    compact = CompactMemory(target, dry_run=False, secrets=(SECRET,))
    assert fields(validate_compact(compact, LIMITS)) == ["request_id"]
    twice = CompactMemory(WriteTarget("req-1", "m", 3), dry_run=False, secrets=(SECRET, SECRET))
    assert fields(validate_compact(twice, LIMITS)) == ["secrets[1].secret_id"]
