"""How many cores this process may use: its CPU affinity, and a container's CPU quota.

A container limited to one CPU on a 64-core host sees all 64 in its
affinity; only its control group's quota says it may use one. The quota
is read the way the kernel applies it: on the process's own cgroup and on
each ancestor up to the mount's root, the smallest wins. cgroup v2 keeps
it in ``cpu.max`` ("max 100000", or "150000 100000": 1.5 cores), v1 in
``cpu.cfs_quota_us`` (-1 for none) over ``cpu.cfs_period_us``. A quota
that is a fraction of a core counts as a whole one, rounded up, so that a
process allowed 1.5 cores still runs two things at once. A file that is
missing or unreadable means no quota there, never an error: the count is a
default, and ``AUTHLEDGER_API_PROCESSES`` says otherwise.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

CGROUP_MOUNT = Path("/sys/fs/cgroup")
PROC_CGROUP = Path("/proc/self/cgroup")


def usable_cores(proc_cgroup: Path = PROC_CGROUP, mount: Path = CGROUP_MOUNT) -> int:
    """The cores this process may run on, lowered by its cgroup's CPU quota if it has one."""
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    quota = cpu_quota(_read(proc_cgroup) or "", mount)
    return affinity if quota is None else max(1, min(affinity, math.ceil(quota)))


def cpu_quota(proc_cgroup: str, mount: Path) -> float | None:
    """Cores' worth of CPU time the cgroups in ``proc_cgroup`` (as /proc/self/cgroup reads) allow, or None."""
    quotas = []
    for line in proc_cgroup.splitlines():
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hierarchy == "0" and controllers == "":
            quotas += [_v2_quota(directory) for directory in _up_to(mount, path)]
        elif "cpu" in controllers.split(","):
            quotas += [_v1_quota(directory) for directory in _up_to(mount / controllers, path)]
    found = [quota for quota in quotas if quota is not None]
    return min(found) if found else None


def _up_to(root: Path, path: str) -> list[Path]:
    # The process's cgroup directory, then each parent, ending at the mount's
    # root: inside a container the root is the container's own cgroup.
    parts = [part for part in path.split("/") if part not in ("", ".", "..")]
    return [root.joinpath(*parts[:depth]) for depth in range(len(parts), -1, -1)]


def _v2_quota(directory: Path) -> float | None:
    fields = (_read(directory / "cpu.max") or "").split()
    if len(fields) != 2 or fields[0] == "max":
        return None
    return _ratio(fields[0], fields[1])


def _v1_quota(directory: Path) -> float | None:
    quota, period = _read(directory / "cpu.cfs_quota_us"), _read(directory / "cpu.cfs_period_us")
    if quota is None or period is None:
        return None
    return _ratio(quota.strip(), period.strip())


def _ratio(quota: str, period: str) -> float | None:
    try:
        microseconds, per = int(quota), int(period)
    except ValueError:
        return None
    return microseconds / per if microseconds > 0 and per > 0 else None


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None
