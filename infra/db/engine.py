"""Connections to PostgreSQL: which server, which role, and driver errors at the edge.

Services run as ``authledger_app``, which may only SELECT and INSERT on the
log; schema changes and projection rebuilds use the login role itself.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import psycopg
from attrs import field, frozen
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.engine import ExceptionContext, make_url
from sqlalchemy.engine.interfaces import DBAPIConnection
from sqlalchemy.exc import ArgumentError, DBAPIError, DisconnectionError, OperationalError, ProgrammingError
from sqlalchemy.pool import ConnectionPoolEntry, PoolProxiedConnection

from domain.errors import ConfigError
from infra.config.values import mask_passwords, mask_url, split_url
from infra.errors import DatabaseUnavailable, ReadOnlyStandby, SchemaMismatch
from infra.db.embedded import start_embedded

APP_ROLE = "authledger_app"
CONNECT_TIMEOUT_SECONDS = 5
# A pooled connection is pinged before use only after sitting idle this long.
# One that answered a moment ago is almost surely alive, and a ping on every
# checkout cost each one-event append a round trip (HikariCP makes the same
# call with its 500 ms aliveBypassWindowMs).
PING_WHEN_IDLE_SECONDS = 0.5
SSL_MODES = ("disable", "allow", "prefer", "require", "verify-ca", "verify-full")  # libpq's
# Which of several hosts libpq settles on (libpq 14's values); a failover pair wants read-write.
TARGET_SESSION_ATTRS = ("any", "read-write", "read-only", "primary", "standby", "prefer-standby")


def _sqlalchemy_url(url: str) -> str:
    scheme, sep, rest = url.partition("://")
    if not sep or scheme not in {"postgres", "postgresql", "postgresql+psycopg"}:
        raise ConfigError(f"database URL {mask_url(url)!r} must start with postgresql://")
    candidate = "postgresql+psycopg://" + _hosts_in_query(rest)
    try:
        make_url(candidate)
    except (ArgumentError, ValueError):  # ValueError: a port that is not a number
        raise ConfigError(f"database URL {mask_url(url)!r} is malformed") from None
    _check_for_driver(candidate, url)
    return candidate


def _check_for_driver(candidate: str, url: str) -> None:
    """``ConfigError`` in one line for a URL the driver would refuse only at the first connection (as "database
    unavailable") or with an internal error: the parameters SQLAlchemy hands psycopg, checked by libpq's own
    parser, then the values libpq checks only on connecting."""
    try:
        parsed = make_url(candidate)
        _, arguments = parsed.get_dialect()().create_connect_args(parsed)
        parameters = conninfo_to_dict(make_conninfo("", **arguments))
    except ArgumentError as error:  # SQLAlchemy's own: a port of several hosts that is not a number
        raise ConfigError(f"database URL {mask_url(url)!r} is malformed: {error}") from None
    except (ValueError, psycopg.Error) as error:
        raise ConfigError(f"database URL {mask_url(url)!r} is malformed: {_quoting_no_secret(error)}") from None
    ports = [*str(parameters.get("port") or "").split(","), "" if parsed.port is None else str(parsed.port)]
    for port in ports:  # SQLAlchemy leaves out a port of 0
        if port and not (port.isdigit() and 1 <= int(port) <= 65535):
            raise ConfigError(f"database URL {mask_url(url)!r} has port {port!r}: a port is a number from 1 to "
                              "65535")
    if parameters.get("target_session_attrs", "any") not in TARGET_SESSION_ATTRS:
        raise ConfigError(f"database URL {mask_url(url)!r} has a target_session_attrs libpq does not know: use one "
                          f"of {', '.join(TARGET_SESSION_ATTRS)}")
    if parameters.get("sslmode", "prefer") not in SSL_MODES:
        raise ConfigError(f"database URL {mask_url(url)!r} has an sslmode libpq does not know: use one of "
                          f"{', '.join(SSL_MODES)}")


def _quoting_no_secret(error: Exception) -> str:
    """libpq's first line, with what it quotes masked unless it is a parameter's name: libpq quotes the
    whole URL, or a token of it, password included."""
    line = (str(error).strip().splitlines() or ["not a URL libpq takes"])[0]
    return re.sub(r'"([^"]*)"', lambda quoted: quoted[0] if re.fullmatch(r"[a-z_]+", quoted[1]) else '"***"', line)


def _hosts_in_query(rest: str) -> str:
    """libpq's multi-host form (``user@h1:5432,h2:5433/db``, a failover pair) as SQLAlchemy takes it
    (``user@/db?host=h1:5432&host=h2:5433``); any other URL (after ``://``) as it is."""
    parts = split_url("postgresql://" + rest)
    if parts is None or "," not in parts.hosts:
        return rest
    hosts = "&".join(f"host={host}" for host in parts.hosts.split(","))
    userinfo = "" if parts.userinfo is None else parts.userinfo + "@"
    query = hosts if parts.query is None else f"{parts.query}&{hosts}"
    return f"{userinfo}{parts.path or '/'}?{query}{'' if parts.fragment is None else '#' + parts.fragment}"


@frozen
class Database:
    """Where the data lives: an external server, or the embedded one in a data directory."""

    url: str = field(repr=mask_url)  # SQLAlchemy form, postgresql+psycopg://; repr() masked, as in any log line
    embedded: bool = False
    # The URL as it was given, for psql and libpq (a multi-host URL keeps its form); None: ``url`` as libpq reads it.
    given: str | None = field(default=None, repr=False)

    @classmethod
    def locate(cls, database_url: str | None, data_dir: Path) -> Database:
        if database_url:
            return cls(_sqlalchemy_url(database_url), given=database_url)
        return cls(_sqlalchemy_url(start_embedded(data_dir)), embedded=True)

    @property
    def plain_url(self) -> str:
        """The libpq URL (``postgresql://``), password included: for psql, never for a log."""
        if self.given is not None:
            return "postgresql://" + self.given.partition("://")[2]
        return self.url.replace("postgresql+psycopg://", "postgresql://", 1)

    @property
    def display_url(self) -> str:
        """The URL as logs and messages show it: userinfo and query masked, as ``config show`` does."""
        return mask_url(self.plain_url)

    @property
    def tool_url(self) -> str:
        """The libpq URL with only its passwords masked (``mask_passwords``), for ``db url``: the user, the hosts,
        the database and the plain parameters (the embedded server's socket is ``?host=...``) stay as other tools
        take them."""
        return mask_passwords(self.plain_url)

    def engine(self, *, pool_size: int = 5, as_app: bool = True) -> Engine:
        """An engine whose sessions run as the application role (or the login role for admin work)."""
        options = f"-c role={APP_ROLE}" if as_app else ""
        engine = create_engine(
            self.url,
            pool_size=pool_size,
            max_overflow=pool_size,
            connect_args={"connect_timeout": CONNECT_TIMEOUT_SECONDS, "options": options},
        )
        _ping_connections_that_sat_idle(engine)
        event.listen(engine, "handle_error", _translate_driver_error)
        return engine

    def admin_engine(self) -> Engine:
        return self.engine(pool_size=2, as_app=False)


def _ping_connections_that_sat_idle(engine: Engine) -> None:
    """``pool_pre_ping``, skipped for connections returned to the pool less than a moment ago.

    A dead connection (the server restarted) is replaced before a caller sees
    it; raising ``DisconnectionError`` on checkout makes the pool discard it
    and hand out a fresh one.
    """

    @event.listens_for(engine, "checkin")
    def remember_when_idle_began(dbapi_connection: DBAPIConnection, record: ConnectionPoolEntry) -> None:
        record.info["idle_since"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def ping_if_idle_for_a_while(
        dbapi_connection: DBAPIConnection, record: ConnectionPoolEntry, proxy: PoolProxiedConnection,
    ) -> None:
        idle_since = record.info.get("idle_since")
        if idle_since is None or time.monotonic() - idle_since < PING_WHEN_IDLE_SECONDS:
            return  # just connected, or in use a moment ago
        try:
            engine.dialect.do_ping(dbapi_connection)
        except engine.dialect.loaded_dbapi.Error as error:
            if engine.dialect.is_disconnect(error, dbapi_connection, None):
                raise DisconnectionError(str(error)) from error
            raise


def describe_connection_error(error: DBAPIError) -> str:
    """One line for a user, without the password and without a traceback."""
    detail = str(error.orig).strip().splitlines()[0] if error.orig else str(error)
    return re.sub(r"[A-Za-z][A-Za-z0-9+.-]*://\S+", lambda found: mask_url(found.group()), detail)


UNDEFINED_TABLE = "42P01"
# A write on a server in recovery: a single-host URL that still leads to a demoted primary or to a standby.
READ_ONLY_TRANSACTION = "25006"
# SQLSTATE classes that mean "the server is not there for us": connection
# exceptions, insufficient resources (too many connections) and operator
# intervention (shutdown, crash recovery). Other operational errors, such as
# a lock timeout, are answers the calling code handles itself.
UNAVAILABLE_CLASSES = ("08", "53", "57P")


def _translate_driver_error(context: ExceptionContext) -> Exception | None:
    """SQLAlchemy's ``handle_error`` for every engine made here: see ``translate_driver_error``."""
    if not isinstance(context.sqlalchemy_exception, DBAPIError):
        return None
    return translate_driver_error(context.sqlalchemy_exception, connecting=context.connection is None,
                                  is_disconnect=context.is_disconnect)


def translate_driver_error(error: DBAPIError, *, connecting: bool, is_disconnect: bool) -> Exception | None:
    """The one place a driver failure becomes an authledger error.

    Every statement, commit and connect of an engine made here passes
    through it (as ``handle_error``), and so does every statement psycopg
    runs itself in a pipelined transaction (``infra.db.pipeline``), so no
    call site wraps its own; what is not translated here reaches the caller
    as SQLAlchemy raised it.
    """
    sqlstate = getattr(error.orig, "sqlstate", None) or ""
    if isinstance(error, ProgrammingError) and sqlstate == UNDEFINED_TABLE:
        return SchemaMismatch(
            f"the database schema is older than this authledger ({describe_connection_error(error)}); "
            "run `authledger db init`"
        )
    if sqlstate == READ_ONLY_TRANSACTION:
        return ReadOnlyStandby()
    if isinstance(error, OperationalError) and (
        connecting or is_disconnect or sqlstate.startswith(UNAVAILABLE_CLASSES)
    ):
        return _unavailable(describe_connection_error(error))
    return None


def _unavailable(message: str) -> Exception:
    if f'parameter "role": "{APP_ROLE}"' in message:
        return SchemaMismatch("the database is not initialised for authledger; run `authledger db init`")
    if "permission denied to set role" in message:
        return ConfigError(
            f"the database user is not a member of {APP_ROLE}; run `GRANT {APP_ROLE} TO <user>` as its owner"
        )
    return DatabaseUnavailable(f"database unavailable: {message}")


def ping(engine: Engine) -> None:
    with engine.connect() as connection:
        connection.execute(text("SELECT 1"))
