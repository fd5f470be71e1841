"""Which database an engine reaches, for what is kept per database in a process (the API-key cache, the
master key's proof)."""

from __future__ import annotations

from weakref import WeakKeyDictionary

from sqlalchemy import Engine

# Rendering a URL costs tens of microseconds, and both callers ask on every request: once per engine.
_IDENTITIES: WeakKeyDictionary[Engine, str] = WeakKeyDictionary()


def database_identity(engine: Engine) -> str:
    """``engine``'s URL without its password: the server and database it reaches, and as whom."""
    if (found := _IDENTITIES.get(engine)) is None:  # two threads may both render it: the same string
        found = _IDENTITIES[engine] = engine.url.set(password=None).render_as_string(hide_password=False)
    return found
