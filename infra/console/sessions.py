"""Console sessions: a signed-in `review` key, held on the server, named by a random cookie.

The browser holds only a random session id (HttpOnly, SameSite=Strict); the
server keeps the key in memory under the id's SHA-256, so neither the cookie
nor a dump of this table gives anyone the key or a working cookie. The key
is kept (not just the caller it named) because every request asks
``authenticate`` again: revoking the key ends the session at its next click.

A session ends after ``idle`` without a request, at sign-out, or when its key
stops working. Sessions live in the ``authledger serve`` process: a restart
signs everyone out, which is the safe way round.

Each session carries its CSRF token (a synchronizer token): every form that
changes state sends it back and ``check_csrf`` compares it in constant time.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
from datetime import datetime, timedelta

from attrs import evolve, frozen

from domain.clients import Caller
from infra.clock import Clock

COOKIE = "authledger_console"
SIGN_IN_COOKIE = "authledger_console_sign_in"  # the sign-in form's CSRF token, before any session exists
DEFAULT_IDLE = timedelta(minutes=15)


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def new_token() -> str:
    return secrets.token_urlsafe(32)


def same_token(given: str | None, expected: str) -> bool:
    """Constant-time comparison; a missing token never matches."""
    return given is not None and hmac.compare_digest(given.encode(), expected.encode())


@frozen
class Session:
    api_key: str
    caller: Caller
    csrf: str
    last_seen: datetime


class Sessions:
    """The signed-in sessions of one server process, with an idle timeout on ``clock``."""

    def __init__(self, clock: Clock, idle: timedelta = DEFAULT_IDLE) -> None:
        self.clock, self.idle = clock, idle
        self._by_digest: dict[str, Session] = {}
        self._lock = threading.Lock()

    def open(self, api_key: str, caller: Caller) -> str:
        """A new session for ``caller``; returns the cookie value, which is stored nowhere."""
        cookie, now = new_token(), self.clock.now()
        with self._lock:
            self._by_digest = {d: s for d, s in self._by_digest.items() if now - s.last_seen <= self.idle}
            self._by_digest[_digest(cookie)] = Session(api_key, caller, new_token(), now)
        return cookie

    def find(self, cookie: str | None) -> tuple[Session | None, bool]:
        """The live session named by ``cookie``, touched; and whether one existed but had gone idle."""
        if not cookie:
            return None, False
        now, digest = self.clock.now(), _digest(cookie)
        with self._lock:
            session = self._by_digest.get(digest)
            if session is None:
                return None, False
            if now - session.last_seen > self.idle:
                del self._by_digest[digest]
                return None, True
            self._by_digest[digest] = session = evolve(session, last_seen=now)
            return session, False

    def replace_caller(self, cookie: str, caller: Caller) -> None:
        """What the key may do today (scopes or tenant changed since sign-in)."""
        with self._lock:
            digest = _digest(cookie)
            if digest in self._by_digest:
                self._by_digest[digest] = evolve(self._by_digest[digest], caller=caller)

    def close(self, cookie: str | None) -> None:
        if cookie:
            with self._lock:
                self._by_digest.pop(_digest(cookie), None)
