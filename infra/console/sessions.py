"""Console sessions: a signed-in `review` key, named by a random cookie, kept in PostgreSQL.

The browser holds only a random session id (HttpOnly, SameSite=Strict). The
``console_sessions`` table keeps, under the id's SHA-256, the SHA-256 of the
key (the hash ``api_keys`` already holds, never the key), the session's CSRF
token and when it was opened and last seen: a dump of the table gives no one a
key or a working cookie. Every ``authledger serve --processes N`` process reads
the same rows, so a browser's next request may land in any of them.

The table is not an event-sourced projection: sessions are not part of the
audit story, so signing in and out records no event and rows are written and
deleted here directly.

Every request finds its row and the shell asks ``authenticate_hash`` again with
the key's hash: revoking the key ends the session at its next click. A session
ends after ``idle`` without a request (its row deleted when found so, and such
rows swept at every sign-in), at sign-out, or when its key stops working.

``last_seen`` is written at most once per ``TOUCH_EVERY`` (a minute), not at
every click, so a session may end up to that minute before ``idle`` has passed
since its very last request; never later.

Each session carries its CSRF token (a synchronizer token): every form that
changes state sends it back and ``same_token`` compares it in constant time.
"""

from __future__ import annotations

import hmac
import secrets
from datetime import datetime, timedelta

from attrs import frozen
from sqlalchemy import Engine, delete, insert, select, update

from domain.clients import Caller
from domain.tokens import hash_token
from infra.clock import Clock
from infra.db import tables

COOKIE = "authledger_console"
SIGN_IN_COOKIE = "authledger_console_sign_in"  # the sign-in form's CSRF token, before any session exists
DEFAULT_IDLE = timedelta(minutes=15)
TOUCH_EVERY = timedelta(minutes=1)  # last_seen is written no more often: not one write per click
SWEEP_LIMIT = 1000  # idle rows deleted per sign-in, so a sign-in never waits on a huge delete


def new_token() -> str:
    return secrets.token_urlsafe(32)


def same_token(given: str | None, expected: str) -> bool:
    """Constant-time comparison; a missing token never matches."""
    return given is not None and hmac.compare_digest(given.encode(), expected.encode())


@frozen
class Stored:
    """A session as its row holds it: the key's hash, the CSRF token, when last seen."""

    key_hash: str
    csrf: str
    last_seen: datetime


@frozen
class Session:
    """A signed-in session, with what its key may do now."""

    key_hash: str
    caller: Caller
    csrf: str
    last_seen: datetime


_S = tables.console_sessions
_c = _S.c


class Sessions:
    """The console's signed-in sessions in ``engine``'s ``console_sessions``, idle after ``idle`` on ``clock``."""

    def __init__(self, engine: Engine, clock: Clock, idle: timedelta = DEFAULT_IDLE) -> None:
        self.engine, self.clock, self.idle = engine, clock, idle

    def open(self, api_key: str) -> str:
        """A new session for ``api_key``; returns the cookie value, which is stored nowhere."""
        cookie, now = new_token(), self.clock.now()
        idle_ones = select(_c.cookie_hash).where(_c.last_seen < now - self.idle).limit(SWEEP_LIMIT)
        with self.engine.begin() as connection:
            connection.execute(delete(_S).where(_c.cookie_hash.in_(idle_ones.scalar_subquery())))
            connection.execute(insert(_S).values(cookie_hash=hash_token(cookie), key_hash=hash_token(api_key),
                                                 csrf=new_token(), created_at=now, last_seen=now))
        return cookie

    def find(self, cookie: str | None) -> tuple[Stored | None, bool]:
        """The live session named by ``cookie``, touched; and whether one existed but had gone idle."""
        if not cookie:
            return None, False
        now, digest = self.clock.now(), hash_token(cookie)
        with self.engine.begin() as connection:
            row = connection.execute(
                select(_c.key_hash, _c.csrf, _c.last_seen).where(_c.cookie_hash == digest)).one_or_none()
            if row is None:
                return None, False
            if now - row.last_seen > self.idle:
                connection.execute(delete(_S).where(_c.cookie_hash == digest))
                return None, True
            last_seen = row.last_seen
            if now - last_seen >= TOUCH_EVERY:
                connection.execute(update(_S).where(_c.cookie_hash == digest, _c.last_seen < now)
                                   .values(last_seen=now))
                last_seen = now
        return Stored(row.key_hash, row.csrf, last_seen), False

    def close(self, cookie: str | None) -> None:
        if cookie:
            with self.engine.begin() as connection:
                connection.execute(delete(_S).where(_c.cookie_hash == hash_token(cookie)))
