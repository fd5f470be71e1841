"""With DATABASE_URL set, a missing data folder is made; one that cannot be is a configuration error."""

from __future__ import annotations

import base64
import os
import subprocess
from pathlib import Path

from click.testing import CliRunner

from cli import cli
from tests.support.servers import AUTHLEDGER, free_port

KEYS = "k1:" + base64.urlsafe_b64encode(b"d" * 32).decode().rstrip("=")


def worker_once(database_url: str, data_dir: Path) -> tuple[int, str, str]:
    env = {"DATABASE_URL": database_url, "AUTHLEDGER_TOKEN_KEYS": KEYS, "AUTHLEDGER_DATA_DIR": str(data_dir),
           "AUTHLEDGER_MAILDIR": None, "AUTHLEDGER_LOG_FORMAT": "json"}
    result = CliRunner().invoke(cli, ["worker", "--once"], env=env)
    return result.exit_code, result.stdout, result.stderr


def test_worker_once_makes_a_missing_data_folder_and_its_maildir(database_url: str, tmp_path: Path) -> None:
    data_dir = tmp_path / "not" / "yet"

    code, out, err = worker_once(database_url, data_dir)

    assert (code, out) == (0, "nothing due\n"), err
    assert {path.name for path in (data_dir / "maildir").iterdir()} >= {"cur", "new", "tmp"}


def test_a_data_folder_that_cannot_be_made_is_a_configuration_error_in_one_line(
    database_url: str, tmp_path: Path
) -> None:
    (tmp_path / "a-file").write_text("")  # whoever runs the test, root included, cannot make a folder under it

    code, out, err = worker_once(database_url, tmp_path / "a-file" / "data")

    assert code == 78 and out == ""
    assert err.startswith(f"Error: the Maildir {tmp_path / 'a-file' / 'data' / 'maildir'} cannot be made: Not a "
                          "directory (AUTHLEDGER_MAILDIR, or AUTHLEDGER_DATA_DIR that holds it by default)")
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_serve_refuses_a_data_folder_that_cannot_be_made_before_it_listens(database_url: str, tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("")
    env = {**os.environ, "DATABASE_URL": database_url, "AUTHLEDGER_TOKEN_KEYS": KEYS,
           "AUTHLEDGER_DATA_DIR": str(tmp_path / "a-file" / "data")}
    env.pop("AUTHLEDGER_MAILDIR", None)

    served = subprocess.run([AUTHLEDGER, "serve", "--port", str(free_port()), "--processes", "2"], env=env,
                            capture_output=True, text=True, timeout=120)

    assert served.returncode == 78 and served.stdout == "", served.stderr
    assert served.stderr.splitlines()[-1].startswith("Error: the Maildir ")
    assert "Traceback" not in served.stderr
