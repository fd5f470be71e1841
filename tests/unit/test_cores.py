"""The cores a process may use: its CPU affinity, lowered by its control group's CPU quota.

Each test lays out a cgroup tree as the kernel shows it (the files under
/sys/fs/cgroup, and /proc/self/cgroup naming the process's cgroup in it)
and reads it the way `serve` does; the last reads this machine's own."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from infra.config.cores import usable_cores

AFFINITY = len(os.sched_getaffinity(0))
V2_PROCESS_IN = "0::/system.slice/authledger.service\n"
V1_PROCESS_IN = "12:memory:/authledger\n4:cpu,cpuacct:/authledger\n1:name=systemd:/authledger\n"


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def cores_in(tmp_path: Path, process_in: str) -> int:
    write(tmp_path / "proc-self-cgroup", process_in)
    return usable_cores(tmp_path / "proc-self-cgroup", tmp_path / "mount")


@pytest.fixture
def many_cores(monkeypatch: pytest.MonkeyPatch) -> int:
    """A host of 64 cores, so that a quota is what lowers the count."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(64)))
    return 64


def test_a_process_with_no_cgroup_files_uses_every_core_of_its_affinity(tmp_path: Path, many_cores: int) -> None:
    assert cores_in(tmp_path, V2_PROCESS_IN) == many_cores


def test_a_cgroup_v2_quota_of_two_cores_gives_two(tmp_path: Path, many_cores: int) -> None:
    write(tmp_path / "mount/system.slice/authledger.service/cpu.max", "200000 100000\n")

    assert cores_in(tmp_path, V2_PROCESS_IN) == 2


def test_a_quota_of_one_and_a_half_cores_rounds_up_to_two(tmp_path: Path, many_cores: int) -> None:
    write(tmp_path / "mount/system.slice/authledger.service/cpu.max", "150000 100000\n")

    assert cores_in(tmp_path, V2_PROCESS_IN) == 2


def test_a_quota_below_one_core_still_gives_one(tmp_path: Path, many_cores: int) -> None:
    write(tmp_path / "mount/system.slice/authledger.service/cpu.max", "20000 100000\n")

    assert cores_in(tmp_path, V2_PROCESS_IN) == 1


def test_an_ancestors_smaller_quota_wins_over_the_process_own(tmp_path: Path, many_cores: int) -> None:
    write(tmp_path / "mount/system.slice/authledger.service/cpu.max", "800000 100000\n")
    write(tmp_path / "mount/system.slice/cpu.max", "300000 100000\n")

    assert cores_in(tmp_path, V2_PROCESS_IN) == 3


def test_max_means_no_quota(tmp_path: Path, many_cores: int) -> None:
    write(tmp_path / "mount/system.slice/authledger.service/cpu.max", "max 100000\n")

    assert cores_in(tmp_path, V2_PROCESS_IN) == many_cores


def test_a_container_sees_its_own_quota_at_the_mounts_root(tmp_path: Path, many_cores: int) -> None:
    # Without a cgroup namespace, /proc/self/cgroup names the host's path,
    # which the container's mount does not have: its own cgroup is the root.
    write(tmp_path / "mount/cpu.max", "100000 100000\n")

    assert cores_in(tmp_path, "0::/docker/4f1c0a\n") == 1


def test_a_cgroup_v1_quota_is_read_from_the_cpu_controllers_hierarchy(tmp_path: Path, many_cores: int) -> None:
    write(tmp_path / "mount/cpu,cpuacct/authledger/cpu.cfs_quota_us", "250000\n")
    write(tmp_path / "mount/cpu,cpuacct/authledger/cpu.cfs_period_us", "100000\n")

    assert cores_in(tmp_path, V1_PROCESS_IN) == 3


def test_a_cgroup_v1_quota_of_minus_one_means_no_quota(tmp_path: Path, many_cores: int) -> None:
    write(tmp_path / "mount/cpu,cpuacct/authledger/cpu.cfs_quota_us", "-1\n")
    write(tmp_path / "mount/cpu,cpuacct/authledger/cpu.cfs_period_us", "100000\n")

    assert cores_in(tmp_path, V1_PROCESS_IN) == many_cores


def test_a_quota_above_the_affinity_leaves_the_affinity(tmp_path: Path) -> None:
    write(tmp_path / "mount/system.slice/authledger.service/cpu.max", f"{(AFFINITY + 8) * 100000} 100000\n")

    assert cores_in(tmp_path, V2_PROCESS_IN) == AFFINITY


@pytest.mark.parametrize("unreadable", ["", "lots 100000", "200000 0", "200000", "-5 100000"])
def test_a_quota_file_that_does_not_parse_counts_as_no_quota(tmp_path: Path, many_cores: int, unreadable: str) -> None:
    write(tmp_path / "mount/system.slice/authledger.service/cpu.max", unreadable)

    assert cores_in(tmp_path, V2_PROCESS_IN) == many_cores


def test_a_process_whose_cgroup_cannot_be_read_uses_its_affinity(tmp_path: Path, many_cores: int) -> None:
    assert usable_cores(tmp_path / "no-such-file", tmp_path / "no-such-mount") == many_cores


def test_this_machine_gives_at_least_one_core_and_no_more_than_its_affinity() -> None:
    assert 1 <= usable_cores() <= AFFINITY
