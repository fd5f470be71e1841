"""With DATABASE_URL set, a missing data folder is made; one that cannot be is a configuration error."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.support.cli import Env, cli_streams, process_env
from tests.support.servers import AUTHLEDGER, free_port


def in_data_dir(env: Env, data_dir: Path) -> Env:
    """``env`` with ``data_dir`` as the data folder and the Maildir left to its default under it."""
    return {**env, "AUTHLEDGER_DATA_DIR": str(data_dir), "AUTHLEDGER_MAILDIR": None}


def test_worker_once_makes_a_missing_data_folder_and_its_maildir(env: Env, tmp_path: Path) -> None:
    data_dir = tmp_path / "not" / "yet"

    code, out, err = cli_streams(in_data_dir(env, data_dir), "worker", "--once")

    assert (code, out) == (0, "nothing due\n"), err
    assert {path.name for path in (data_dir / "maildir").iterdir()} >= {"cur", "new", "tmp"}


def test_a_data_folder_that_cannot_be_made_is_a_configuration_error_in_one_line(env: Env, tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("")  # whoever runs the test, root included, cannot make a folder under it

    code, out, err = cli_streams(in_data_dir(env, tmp_path / "a-file" / "data"), "worker", "--once")

    assert code == 78 and out == ""
    assert err.startswith(f"Error: the Maildir {tmp_path / 'a-file' / 'data' / 'maildir'} cannot be made: Not a "
                          "directory (AUTHLEDGER_MAILDIR, or AUTHLEDGER_DATA_DIR that holds it by default)")
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_serve_refuses_a_data_folder_that_cannot_be_made_before_it_listens(env: Env, tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("")

    served = subprocess.run([AUTHLEDGER, "serve", "--port", str(free_port()), "--processes", "2"],
                            env=process_env(in_data_dir(env, tmp_path / "a-file" / "data")),
                            capture_output=True, text=True, timeout=120)

    assert served.returncode == 78 and served.stdout == "", served.stderr
    assert served.stderr.splitlines()[-1].startswith("Error: the Maildir ")
    assert "Traceback" not in served.stderr
