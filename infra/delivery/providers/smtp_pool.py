"""Idle SMTP sessions kept open between messages, for ``SmtpMailer``."""

from __future__ import annotations

import smtplib
import threading
import time


class SessionPool:
    """Up to ``size`` idle, logged-in SMTP sessions, each closed after ``idle_seconds`` unused.

    Thread-safe. A sending thread ``take``s a session (the most recently
    used: the likeliest to be alive) or opens its own when none is idle, and
    ``put``s it back after a clean transaction. A session in use belongs to
    its thread alone, so there are never more sessions open than sends in
    flight plus ``size`` idle ones; with at most ``size`` sends in flight, at
    most ``size`` connections.

    A relay drops sessions it has kept idle too long (RFC 5321 allows five
    minutes), so idle sessions are closed here first, by a timer that runs
    only while some are idle. Closing sends QUIT, outside the lock.
    """

    def __init__(self, size: int, idle_seconds: float) -> None:
        self.size = size
        self.idle_seconds = idle_seconds
        self._lock = threading.Lock()
        self._idle: list[tuple[float, smtplib.SMTP]] = []  # (last used, session), oldest first
        self._reaper: threading.Timer | None = None
        self._closed = False

    def take(self) -> smtplib.SMTP | None:
        """The most recently used idle session, or None: then open one."""
        stale: list[smtplib.SMTP] = []
        found = None
        with self._lock:
            while self._idle and found is None:
                used, session = self._idle.pop()
                if time.monotonic() - used < self.idle_seconds:
                    found = session
                else:
                    stale.append(session)
        _close_all(stale)
        return found

    def put(self, session: smtplib.SMTP) -> None:
        """Keeps ``session`` for the next message, or closes it when the pool is full or closed."""
        with self._lock:
            keep = not self._closed and len(self._idle) < self.size
            if keep:
                self._idle.append((time.monotonic(), session))
                self._schedule(self.idle_seconds)
        if not keep:
            close_quietly(session)

    def close(self) -> None:
        """Closes every idle session; sessions in use are closed when they come back."""
        with self._lock:
            self._closed = True
            sessions = [session for _, session in self._idle]
            self._idle.clear()
            if self._reaper is not None:
                self._reaper.cancel()
                self._reaper = None
        _close_all(sessions)

    def _schedule(self, seconds: float) -> None:
        if self._reaper is None:
            self._reaper = threading.Timer(seconds, self._reap)
            self._reaper.daemon = True
            self._reaper.start()

    def _reap(self) -> None:
        now = time.monotonic()
        with self._lock:
            self._reaper = None
            stale = [session for used, session in self._idle if now - used >= self.idle_seconds]
            self._idle = [(used, session) for used, session in self._idle if now - used < self.idle_seconds]
            if self._idle and not self._closed:
                self._schedule(self._idle[0][0] + self.idle_seconds - now)
        _close_all(stale)


def close_quietly(session: smtplib.SMTP) -> None:
    """QUIT politely, or just close the socket when the session is already broken."""
    try:
        session.quit()
    except OSError:
        session.close()


def _close_all(sessions: list[smtplib.SMTP]) -> None:
    for session in sessions:
        close_quietly(session)
