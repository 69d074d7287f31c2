"""CPU time of process trees from /proc: per-process stat lines, the process table, machine busy."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")


@dataclass(frozen=True)
class Stat:
    """The fields of /proc/<pid>/stat the bench uses; times in clock ticks (SC_CLK_TCK)."""

    pid: int
    comm: str
    ppid: int
    utime: int
    stime: int
    # CPU of children this process has waited for (their own and their reaped children's).
    cutime: int
    cstime: int
    # Clock ticks after boot at which the process started.
    starttime: int

    @property
    def ticks(self) -> int:
        """This process's CPU plus that of the children it reaped: a process that exits inside
        a measured interval moves its time into its parent's cutime/cstime, not out of the sum."""
        return self.utime + self.stime + self.cutime + self.cstime


def clock_ticks() -> int:
    return os.sysconf("SC_CLK_TCK")


def parse_stat(text: str) -> Stat:
    """One /proc/<pid>/stat line. `comm` is in parentheses and may itself hold spaces or
    parentheses, so the fields after it are counted from the last ')'."""
    head, _, tail = text.rpartition(")")
    pid, _, comm = head.partition(" (")
    fields = tail.split()
    # After comm: state ppid pgrp session tty_nr tpgid flags minflt cminflt majflt cmajflt
    # utime stime cutime cstime priority nice num_threads itrealvalue starttime (stat(5)).
    return Stat(
        pid=int(pid),
        comm=comm,
        ppid=int(fields[1]),
        utime=int(fields[11]),
        stime=int(fields[12]),
        cutime=int(fields[13]),
        cstime=int(fields[14]),
        starttime=int(fields[19]),
    )


def read_stat(pid: int, proc: Path = PROC) -> Stat | None:
    """The process's stat, or None when it is gone (or not in this pid namespace)."""
    try:
        return parse_stat((proc / str(pid) / "stat").read_text())
    except (OSError, ValueError, IndexError):
        return None


def process_table(proc: Path = PROC) -> dict[int, Stat]:
    """Every process visible now; those that exit while the table is read are left out."""
    table = {}
    for entry in proc.iterdir():
        if entry.name.isdigit():
            stat = read_stat(int(entry.name), proc)
            if stat is not None:
                table[stat.pid] = stat
    return table


def tree(roots: Iterable[int], table: Mapping[int, Stat]) -> set[int]:
    """The roots that are alive and all their descendants."""
    children: dict[int, list[int]] = {}
    for stat in table.values():
        children.setdefault(stat.ppid, []).append(stat.pid)
    found: set[int] = set()
    todo = [pid for pid in roots if pid in table]
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo.extend(children.get(pid, ()))
    return found


def tree_ticks(roots: Iterable[int], table: Mapping[int, Stat]) -> int:
    """CPU ticks used so far by the roots' process trees (including reaped children)."""
    return sum(table[pid].ticks for pid in tree(roots, table))


def measured_ticks(roots: Sequence[int], table: Mapping[int, Stat]) -> int | None:
    """`tree_ticks` of the roots, or None when none of them is alive (nothing to measure)."""
    return tree_ticks(roots, table) if any(pid in table for pid in roots) else None


def busy_ticks(proc_stat: str) -> int | None:
    """Machine-wide busy ticks from /proc/stat's `cpu` line: user, nice, system, irq and
    softirq (guest time is already inside user and nice; idle, iowait and steal are not ours)."""
    for line in proc_stat.splitlines():
        fields = line.split()
        if fields and fields[0] == "cpu":
            user, nice, system, _idle, _iowait, irq, softirq = (int(v) for v in fields[1:8])
            return user + nice + system + irq + softirq
    return None


def machine_busy(proc: Path = PROC) -> int | None:
    try:
        return busy_ticks((proc / "stat").read_text())
    except OSError:
        return None


def boot_time(proc: Path = PROC) -> float | None:
    """Seconds since the epoch at boot (`btime` in /proc/stat)."""
    try:
        for line in (proc / "stat").read_text().splitlines():
            if line.startswith("btime "):
                return float(line.split()[1])
    except (OSError, ValueError):
        pass
    return None


def started_at(stat: Stat, boot: float, hz: int) -> float:
    """When the process started, in seconds since the epoch."""
    return boot + stat.starttime / hz


def postmaster(
    checkpointer: int | None, started: float, proc: Path = PROC, tolerance: float = 3.0
) -> tuple[int | None, str]:
    """The postmaster's pid here: the parent of the server's checkpointer, if that parent
    started when the server says its postmaster did (so not a process that merely has the
    same pid in another pid namespace); else None and why."""
    if checkpointer is None:
        return None, "the server shows no checkpointer in pg_stat_activity"
    child = read_stat(checkpointer, proc)
    if child is None:
        return None, f"checkpointer pid {checkpointer} is not visible in {proc}"
    parent = read_stat(child.ppid, proc)
    boot = boot_time(proc)
    if parent is None or boot is None:
        return None, f"no stat for the checkpointer's parent {child.ppid} or no btime"
    here = started_at(parent, boot, clock_ticks())
    if abs(here - started) > tolerance:
        return None, (
            f"pid {parent.pid} started at {here:.0f}, the postmaster at {started:.0f}: "
            "Postgres runs in another pid namespace or host"
        )
    return parent.pid, ""
