"""A DATABASE_URL the driver cannot take is a configuration error in one line, before any connection."""

from __future__ import annotations

from pathlib import Path

import pytest

from domain.errors import ConfigError
from infra.db.engine import Database
from tests.support.cli import cli_env, cli_streams


@pytest.mark.parametrize(("url", "said"), [
    ("mysql://db.example/authledger", "must start with postgresql://"),
    ("garbage", "must start with postgresql://"),
    ("postgresql://db.example:99999/authledger", "has port '99999': a port is a number from 1 to 65535"),
    ("postgresql://db.example:0/authledger", "has port '0'"),
    ("postgresql://db.example:abc/authledger", "is malformed"),
    ("postgresql://a.example:5432,b.example:x/authledger", "is malformed: Received non-integer port arguments"),
    ("postgresql://ada:s3cret@db.example/authledger?bogus=1", 'is malformed: invalid connection option "bogus"'),
    ("postgresql://db.example/authledger?sslmode=maybe", "has an sslmode libpq does not know: use one of disable,"),
    ("postgresql://a.example:5432,b.example/auth?target_session_attrs=readwrite",
     "has a target_session_attrs libpq does not know: use one of any, read-write,"),
    ("postgresql://ada:s3cret@[::1/authledger", "is malformed"),
    ("postgresql://ada:s3cret@db.example/authledger?port=x", "is malformed: Received non-integer port"),
])
def test_a_url_the_driver_cannot_take_is_refused_in_one_line_that_quotes_no_secret(url: str, said: str) -> None:
    with pytest.raises(ConfigError) as refused:
        Database.locate(url, Path("unused"))
    assert said in refused.value.message
    assert "s3cr" not in refused.value.message

    code, _, err = cli_streams(cli_env(url), "tenants", "list")
    assert code == 78
    assert err.startswith("Error: database URL ") and len(err.splitlines()) == 1
    assert "s3cr" not in err


@pytest.mark.parametrize("url", [
    "postgresql://ada:pw@db.example:5432/authledger?sslmode=verify-full&application_name=x",
    "postgres://db.example/authledger",
    "postgresql://a.example:5432,b.example:5433/authledger?target_session_attrs=read-write",
    "postgresql:///authledger?host=/var/run/postgresql",
    "postgresql://ada:s3/c?r#t@db.example/auth",  # SQLAlchemy takes the last @ as the end of the password
])
def test_the_urls_libpq_takes_are_taken(url: str) -> None:
    assert Database.locate(url, Path("unused")).url.startswith("postgresql+psycopg://")
