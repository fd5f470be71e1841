"""Settings from the environment: declared once, parsed, checked one line per bad value, shown by
`config show`, fed to the policies and listed in docs/configuration.md."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from domain.delivery import DeliveryPolicy
from domain.policy import OtpPolicy, ResetPolicy
from domain.send_limits import SendLimits
from infra.bootstrap import App
from infra.config.cores import usable_cores
from infra.config.settings import SETTINGS, Settings, default_api_processes, load_settings, policy, with_settings_table
from tests.support.cli import run_cli

CONFIGURATION = Path(__file__).parents[2] / "docs" / "configuration.md"
AUTHLEDGER = str(Path(sys.executable).parent / "authledger")

ACCOUNT_LOCK_DEFAULTS = {
    "AUTHLEDGER_OTP_ACCOUNT_LOCK_FAILURES": 100,
    "AUTHLEDGER_OTP_ACCOUNT_LOCK_SECONDS": 900,
    "AUTHLEDGER_OTP_ACCOUNT_LOCK_MAX_SECONDS": 86400,
}


def test_config_show_lists_the_otp_account_lock_defaults() -> None:
    result = run_cli({}, "config", "show", "--json")

    assert result.exit_code == 0, result.output
    shown = json.loads(result.output)
    assert {name: shown[name]["value"] for name in ACCOUNT_LOCK_DEFAULTS} == ACCOUNT_LOCK_DEFAULTS
    assert {shown[name]["source"] for name in ACCOUNT_LOCK_DEFAULTS} == {"default"}


def test_otp_account_lock_settings_are_shown_as_set() -> None:
    env = {
        "AUTHLEDGER_OTP_ACCOUNT_LOCK_FAILURES": "3",
        "AUTHLEDGER_OTP_ACCOUNT_LOCK_SECONDS": " 60 ",
        "AUTHLEDGER_OTP_ACCOUNT_LOCK_MAX_SECONDS": "60",
    }

    result = run_cli(env, "config", "show")

    assert result.exit_code == 0, result.output
    assert _line(result.output, "AUTHLEDGER_OTP_ACCOUNT_LOCK_FAILURES") == ("3", "environment")
    assert _line(result.output, "AUTHLEDGER_OTP_ACCOUNT_LOCK_SECONDS") == ("60", "environment")
    assert _line(result.output, "AUTHLEDGER_OTP_ACCOUNT_LOCK_MAX_SECONDS") == ("60", "environment")


def _line(output: str, variable: str) -> tuple[str, str]:
    """(value, source) of ``variable`` in config show's text: VARIABLE=value  # source."""
    [line] = [line for line in output.splitlines() if line.startswith(variable + "=")]
    assignment, _, source = line.partition("  # ")
    return assignment.removeprefix(variable + "=").rstrip(), source


def test_otp_account_lock_settings_reach_the_otp_policy() -> None:
    settings = load_settings({
        "DATABASE_URL": "postgresql://authledger@localhost:1/never_connected",
        "AUTHLEDGER_TOKEN_KEYS": "k1:" + "a" * 43,
        "AUTHLEDGER_OTP_ACCOUNT_LOCK_FAILURES": "7",
        "AUTHLEDGER_OTP_ACCOUNT_LOCK_SECONDS": "120",
        "AUTHLEDGER_OTP_ACCOUNT_LOCK_MAX_SECONDS": "3600",
    })  # fmt: skip

    policy = App(settings).services.otp_policy  # builds the engine, connects nowhere

    assert policy.account_lock_threshold == 7
    assert (policy.account_lock_base, policy.account_lock_max) == (timedelta(minutes=2), timedelta(hours=1))
    assert [policy.account_lock_backoff(n) for n in (1, 2, 6, 7)] == [
        timedelta(minutes=2), timedelta(minutes=4), timedelta(hours=1), timedelta(hours=1),
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("variable", "value", "said"),
    [
        ("AUTHLEDGER_OTP_ACCOUNT_LOCK_FAILURES", "0", "must be between 1 and 100, got 0"),
        ("AUTHLEDGER_OTP_ACCOUNT_LOCK_FAILURES", "many", "must be a whole number, got 'many'"),
        ("AUTHLEDGER_OTP_ACCOUNT_LOCK_SECONDS", "-1", "must be between 1 and 2592000, got -1"),
        ("AUTHLEDGER_OTP_ACCOUNT_LOCK_SECONDS", "1.5", "must be a whole number, got '1.5'"),
        ("AUTHLEDGER_OTP_ACCOUNT_LOCK_MAX_SECONDS", "2592001", "must be between 1 and 2592000, got 2592001"),
        ("AUTHLEDGER_OTP_ACCOUNT_LOCK_MAX_SECONDS", "1d", "must be a whole number, got '1d'"),
    ],
)
def test_a_bad_otp_account_lock_setting_is_one_clear_line_and_a_non_zero_exit(
    variable: str, value: str, said: str
) -> None:
    result = run_cli({variable: value}, "config", "show")

    assert result.exit_code == 78
    assert result.output == f"Error: invalid configuration:\n  {variable} {said}\n"


def test_every_bad_otp_account_lock_setting_is_reported_at_once() -> None:
    result = run_cli({
        "AUTHLEDGER_OTP_ACCOUNT_LOCK_FAILURES": "-3",
        "AUTHLEDGER_OTP_ACCOUNT_LOCK_SECONDS": "soon",
        "AUTHLEDGER_OTP_ACCOUNT_LOCK_MAX_SECONDS": "0",
    }, "config", "show")  # fmt: skip

    assert result.exit_code == 78
    lines = result.output.splitlines()
    assert lines[0] == "Error: invalid configuration:"
    assert [line.split()[0] for line in lines[1:]] == list(ACCOUNT_LOCK_DEFAULTS)
    assert "Traceback" not in result.output


def test_an_account_lock_cap_below_its_base_is_refused() -> None:
    result = run_cli({
        "AUTHLEDGER_OTP_ACCOUNT_LOCK_SECONDS": "3600", "AUTHLEDGER_OTP_ACCOUNT_LOCK_MAX_SECONDS": "600",
    }, "config", "show")  # fmt: skip

    assert result.exit_code == 78
    assert result.output == (
        "Error: invalid configuration:\n  AUTHLEDGER_OTP_ACCOUNT_LOCK_MAX_SECONDS (600) must not be shorter "
        "than AUTHLEDGER_OTP_ACCOUNT_LOCK_SECONDS (3600)\n"
    )


def test_the_send_limits_settings_reach_their_policy() -> None:
    settings = load_settings({
        "AUTHLEDGER_LIMIT_PER_ADDRESS": "8", "AUTHLEDGER_LIMIT_PER_ADDRESS_PER_IP": "2",
        "AUTHLEDGER_LIMIT_PER_USER_PER_IP": "2", "AUTHLEDGER_LIMIT_PER_IP": "50",
        "AUTHLEDGER_LIMIT_VERIFIES_PER_IP": "200",
    })  # fmt: skip

    assert policy(settings, SendLimits) == SendLimits(
        per_address=8, per_address_per_ip=2, per_user_per_ip=2, per_ip=50, verifies_per_ip=200
    )


def test_an_ips_part_of_an_address_as_large_as_the_whole_is_refused() -> None:
    result = run_cli({"AUTHLEDGER_LIMIT_PER_ADDRESS": "4", "AUTHLEDGER_LIMIT_PER_ADDRESS_PER_IP": "4"}, "config",
                     "show")

    assert result.exit_code == 78
    assert result.output == (
        "Error: invalid configuration:\n  AUTHLEDGER_LIMIT_PER_ADDRESS_PER_IP (4) must be smaller "
        "than AUTHLEDGER_LIMIT_PER_ADDRESS (4)\n"
    )


def test_config_show_lists_every_declared_setting_in_declaration_order() -> None:
    result = run_cli({}, "config", "show", "--json")

    assert result.exit_code == 0, result.output
    assert list(json.loads(result.output)) == [setting.variable for setting in SETTINGS]


def test_the_default_settings_give_the_default_policies() -> None:
    settings = Settings()

    assert policy(settings, ResetPolicy) == ResetPolicy()
    assert policy(settings, OtpPolicy) == OtpPolicy()
    assert policy(settings, DeliveryPolicy) == DeliveryPolicy()
    assert policy(settings, SendLimits) == SendLimits()


def test_each_policy_setting_reaches_its_policy_field() -> None:
    settings = load_settings({
        "AUTHLEDGER_RESET_TTL": "600", "AUTHLEDGER_RESET_COOLDOWN": "0", "AUTHLEDGER_RESET_HOURLY_LIMIT": "9",
        "AUTHLEDGER_OTP_TTL": "120", "AUTHLEDGER_OTP_COOLDOWN": "30", "AUTHLEDGER_OTP_HOURLY_LIMIT": "4",
        "AUTHLEDGER_OTP_DIGITS": "8", "AUTHLEDGER_OTP_MAX_ATTEMPTS": "3",
        "AUTHLEDGER_LEASE_SECONDS": "90", "AUTHLEDGER_LEASE_MARGIN": "7", "AUTHLEDGER_MAX_ATTEMPTS": "2",
    })  # fmt: skip

    assert policy(settings, ResetPolicy) == ResetPolicy(
        ttl=timedelta(minutes=10), cooldown=timedelta(0), hourly_limit=9
    )
    assert policy(settings, OtpPolicy) == OtpPolicy(
        ttl=timedelta(minutes=2), cooldown=timedelta(seconds=30), hourly_limit=4, digits=8, max_attempts=3
    )
    assert policy(settings, DeliveryPolicy) == DeliveryPolicy(
        lease=timedelta(seconds=90), margin=timedelta(seconds=7), max_attempts=2
    )


def test_the_configuration_page_lists_every_setting_as_declared() -> None:
    page = CONFIGURATION.read_text()

    assert page == with_settings_table(page), (
        "docs/configuration.md's settings table is out of date: "
        "run `python -m infra.config.settings docs/configuration.md`"
    )


# -- how many API processes `serve` runs --------------------------------------------------------


def test_unset_serve_runs_one_api_process_for_each_core_it_may_run_on() -> None:
    result = run_cli({}, "config", "show", "--json")

    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["AUTHLEDGER_API_PROCESSES"] == {
        "value": min(usable_cores(), 4), "source": "default, one for each core (at most 4)"}


def default_processes_of_a_process(data_dir: Path, before_it_runs: Callable[[], object]) -> int:
    """The API processes a real `authledger config show` reports, on no settings but its data directory,
    run in a process that ``before_it_runs`` has placed (on fewer cores, in a cgroup)."""
    env = {name: value for name, value in os.environ.items()
           if not name.startswith("AUTHLEDGER_") and name != "DATABASE_URL"}
    shown = subprocess.run([AUTHLEDGER, "config", "show", "--json"], env={**env, "AUTHLEDGER_DATA_DIR": str(data_dir)},
                           preexec_fn=before_it_runs, capture_output=True, text=True, timeout=60, check=True)
    return json.loads(shown.stdout)["AUTHLEDGER_API_PROCESSES"]["value"]


def test_a_process_held_to_one_core_runs_one_api_process(tmp_path: Path) -> None:
    one_core = min(os.sched_getaffinity(0))

    assert default_processes_of_a_process(tmp_path, lambda: os.sched_setaffinity(0, {one_core})) == 1


CPU_HIERARCHY = Path("/sys/fs/cgroup/cpu")  # cgroup v1's cpu controller, where the quota is one file


@pytest.fixture
def cgroup_of_one_core(tmp_path: Path) -> Iterator[Path]:
    """A real cgroup whose quota is one core's time: needs root and cgroup v1, as this machine and CI have."""
    if not (CPU_HIERARCHY / "cpu.cfs_quota_us").exists() or not os.access(CPU_HIERARCHY, os.W_OK):
        pytest.skip("needs a writable cgroup v1 cpu hierarchy (root, cgroup v1)")
    if len(os.sched_getaffinity(0)) == 1:
        pytest.skip("this process may run on one core already: a quota of one would change nothing")
    cgroup = CPU_HIERARCHY / f"authledger-test-{tmp_path.name}"
    cgroup.mkdir()
    try:
        (cgroup / "cpu.cfs_quota_us").write_text(str(int((cgroup / "cpu.cfs_period_us").read_text())))
        yield cgroup
    finally:
        cgroup.rmdir()  # the process it held has exited


def test_a_process_whose_cgroup_allows_one_core_runs_one_api_process(tmp_path: Path, cgroup_of_one_core: Path) -> None:
    def join_the_cgroup() -> None:
        (cgroup_of_one_core / "cgroup.procs").write_text(str(os.getpid()))

    assert default_processes_of_a_process(tmp_path, join_the_cgroup) == 1


def test_unset_serve_runs_at_most_four_api_processes_however_many_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("infra.config.settings.usable_cores", lambda: 64)

    assert default_api_processes() == 4
    assert Settings().api_process_count == 4
    assert Settings(api_processes=6).api_process_count == 6


def test_api_processes_set_in_the_environment_are_shown_as_set() -> None:
    result = run_cli({"AUTHLEDGER_API_PROCESSES": "3"}, "config", "show")

    assert result.exit_code == 0, result.output
    assert _line(result.output, "AUTHLEDGER_API_PROCESSES") == ("3", "environment")


@pytest.mark.parametrize(("value", "said"), [
    ("0", "must be between 1 and 64, got 0"),
    ("65", "must be between 1 and 64, got 65"),
    ("two", "must be a whole number, got 'two'"),
])  # fmt: skip
def test_a_bad_api_processes_setting_is_one_clear_line_and_serve_starts_nothing(
    value: str, said: str, tmp_path: Path
) -> None:
    data_dir = tmp_path / "data"

    result = run_cli({"AUTHLEDGER_DATA_DIR": str(data_dir), "AUTHLEDGER_API_PROCESSES": value}, "serve", "--port", "1")

    assert result.exit_code == 78
    assert result.output == f"Error: invalid configuration:\n  AUTHLEDGER_API_PROCESSES {said}\n"
    assert not data_dir.exists(), "no embedded server, key or Maildir was made"
