"""Which database an engine reaches, for what is kept per database in a process (the API-key cache, the
master key's proof)."""

from __future__ import annotations

from weakref import WeakKeyDictionary

from sqlalchemy import Engine

from infra.config.values import mask_passwords

# Rendering a URL costs tens of microseconds, and both callers ask on every request: once per engine.
_IDENTITIES: WeakKeyDictionary[Engine, str] = WeakKeyDictionary()


def database_identity(engine: Engine) -> str:
    """``engine``'s URL without its passwords (``mask_passwords``: the userinfo's and a query's
    ``password=``): the server and database it reaches, and as whom."""
    if (found := _IDENTITIES.get(engine)) is None:  # two threads may both render it: the same string
        found = _IDENTITIES[engine] = mask_passwords(engine.url.render_as_string(hide_password=False))
    return found
