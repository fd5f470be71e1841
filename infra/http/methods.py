"""The methods a path takes, across every route that serves it: the whole of a 405's ``Allow``.

Starlette answers a wrong method with the ``Allow`` of the first route whose
path matched, and a path served by two routes (``GET`` and ``POST`` of
``/v1/admin/clients``, of the console's sign-in) would name only one of its
methods. This walks every route, into mounted apps, as the router would.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from starlette.routing import BaseRoute, Match, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import Scope

STATIC_METHODS = {"GET", "HEAD"}  # what StaticFiles serves; it refuses the rest with a bare 405


def allowed_methods(routes: Iterable[BaseRoute], path: str, method: str) -> list[str]:
    """Every method some route of ``routes`` takes at ``path``, sorted."""
    return sorted(_methods(routes, {"type": "http", "path": path, "root_path": "", "method": method}))


def _methods(routes: Iterable[BaseRoute], scope: Scope) -> set[str]:
    found: set[str] = set()
    for route in routes:
        match, child = route.matches(scope)  # a Route matches partially when its path does and its method not
        if match is Match.NONE:
            continue
        if isinstance(route, Mount) and isinstance(route.app, StaticFiles):
            found |= STATIC_METHODS
        elif isinstance(route, Mount):
            found |= _methods(_routes_of(route.app), {**scope, **child})
        elif isinstance(route, Route) and route.methods:
            found |= route.methods
    return found


def _routes_of(app: Any) -> list[BaseRoute]:
    """The routes of a mounted app, through the middleware wrapped around its router (``app`` attributes)."""
    while app is not None and not hasattr(app, "routes"):
        app = getattr(app, "app", None)
    return list(app.routes) if app is not None else []
