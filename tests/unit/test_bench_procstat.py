"""bench/procstat.py: /proc/<pid>/stat lines, process trees and their CPU, the postmaster."""

from __future__ import annotations

import os
from pathlib import Path

from bench import procstat
from bench.procstat import Stat, busy_ticks, parse_stat, tree, tree_ticks

# A real line's shape (stat(5)): utime 25, stime 24, cutime 7, cstime 3, starttime 48077.
LINE = (
    "10111 (cat) R 10059 10059 5302 0 -1 4194304 103 0 0 0 25 24 7 3 20 0 1 0 48077 3133440 428 "
    "18446744073709551615 94092520992768 94092521012649 140731565804512 0 0 0 0 0 0 0 0 0 17 1"
)


def _stat(pid: int, ppid: int, utime: int = 0, stime: int = 0, cutime: int = 0) -> Stat:
    return Stat(pid, "p", ppid, utime, stime, cutime, 0, 0)


def test_stat_line_fields_are_counted_after_the_command_name() -> None:
    stat = parse_stat(LINE)
    assert (stat.pid, stat.comm, stat.ppid) == (10111, "cat", 10059)
    assert (stat.utime, stat.stime, stat.cutime, stat.cstime) == (25, 24, 7, 3)
    assert stat.starttime == 48077
    assert stat.ticks == 25 + 24 + 7 + 3


def test_a_command_name_with_spaces_and_parentheses_does_not_shift_the_fields() -> None:
    odd = LINE.replace("(cat)", "(postgres: a) (b)")
    stat = parse_stat(odd)
    assert stat.comm == "postgres: a) (b"
    assert (stat.ppid, stat.utime, stat.starttime) == (10059, 25, 48077)


def test_own_process_is_read_from_proc() -> None:
    stat = procstat.read_stat(os.getpid())
    assert stat is not None
    assert stat.ppid == os.getppid()
    assert procstat.read_stat(2**22 + 12345) is None  # beyond pid_max: never a process


def test_tree_holds_the_roots_and_every_descendant_only() -> None:
    table = {
        1: _stat(1, 0),
        10: _stat(10, 1, utime=5),  # a postmaster
        11: _stat(11, 10, utime=3, stime=1),
        12: _stat(12, 10, stime=2),
        13: _stat(13, 12, utime=1),
        20: _stat(20, 1, utime=100),  # unrelated
    }
    assert tree([10], table) == {10, 11, 12, 13}
    assert tree([11, 20], table) == {11, 20}
    assert tree([99], table) == set()
    assert tree_ticks([10], table) == 5 + 4 + 2 + 1


def test_a_child_that_exits_inside_the_interval_keeps_its_time_in_the_tree() -> None:
    before = {10: _stat(10, 1, utime=5), 11: _stat(11, 10, utime=4)}
    # 11 used 2 more ticks, exited and was reaped: its 6 ticks are now the parent's cutime.
    after = {10: _stat(10, 1, utime=5, cutime=6)}
    assert tree_ticks([10], after) - tree_ticks([10], before) == 2


def test_machine_busy_leaves_out_idle_iowait_and_steal() -> None:
    text = "cpu  100 5 20 1000 40 3 7 50 0 0\ncpu0 50 2 10 500 20 1 3 25 0 0\nbtime 1700000000\n"
    assert busy_ticks(text) == 100 + 5 + 20 + 3 + 7
    assert busy_ticks("intr 1 2 3\n") is None


def _proc(root: Path, stats: dict[int, str], btime: int) -> Path:
    for pid, line in stats.items():
        (root / str(pid)).mkdir(parents=True)
        (root / str(pid) / "stat").write_text(line)
    (root / "stat").write_text(f"cpu  1 2 3 4 5 6 7 8 0 0\nbtime {btime}\n")
    return root


def _line(pid: int, comm: str, ppid: int, starttime: int) -> str:
    return f"{pid} ({comm}) S {ppid} 1 1 0 -1 0 0 0 0 0 1 2 0 0 20 0 1 0 {starttime} 0 0"


def test_the_postmaster_is_the_checkpointers_parent_started_when_the_server_says(
    tmp_path: Path,
) -> None:
    hz = procstat.clock_ticks()
    proc = _proc(
        tmp_path,
        {
            2198: _line(2198, "postgres", 1, starttime=40 * hz),
            2199: _line(2199, "postgres", 2198, starttime=41 * hz),
        },
        btime=1_700_000_000,
    )
    assert procstat.postmaster(2199, 1_700_000_040.5, proc) == (2198, "")
    pid, why = procstat.postmaster(2199, 1_700_009_000.0, proc)
    assert pid is None
    assert "another pid namespace" in why
    pid, why = procstat.postmaster(4242, 1_700_000_040.0, proc)
    assert pid is None
    assert "not visible" in why
    assert procstat.postmaster(None, 0.0, proc)[0] is None
