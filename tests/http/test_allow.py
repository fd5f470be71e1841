"""A 405's ``Allow`` names every method of the path, on every path the app serves."""

from __future__ import annotations

import re
from collections import defaultdict

import pytest
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from infra.http.app import create_app
from infra.http.methods import allowed_methods
from infra.services.unit_of_work import ServiceContext
from tests.http.support import asgi_client, assert_problem

pytestmark = pytest.mark.anyio


def served_paths(ctx: ServiceContext) -> dict[str, set[str]]:
    """Each path of the app (parameters filled in) and the methods its routes take, as declared."""
    paths: dict[str, set[str]] = defaultdict(set)

    def walk(routes: list, prefix: str) -> None:
        for route in routes:
            if isinstance(route, Mount) and isinstance(route.app, StaticFiles):
                paths[prefix + route.path + "/x.css"] |= {"GET", "HEAD"}
            elif isinstance(route, Mount):
                app = route.app
                while not hasattr(app, "routes"):
                    app = app.app
                walk(app.routes, prefix + route.path)
            elif isinstance(route, Route):
                paths[re.sub(r"\{[^}]+\}", "x", prefix + route.path)] |= route.methods or set()

    walk(create_app(ctx, reset_page=True).routes, "")
    return paths


async def test_a_wrong_method_on_admin_clients_names_both_get_and_post(ctx: ServiceContext, api_key: str) -> None:
    async with asgi_client(ctx, api_key) as api:
        response = await api.delete("/v1/admin/clients")
    assert_problem(response, 405, "method-not-allowed")
    assert response.headers["Allow"] == "GET, HEAD, POST"


async def test_every_path_answers_a_wrong_method_with_all_its_methods(ctx: ServiceContext, api_key: str) -> None:
    paths = served_paths(ctx)
    assert {"/v1/admin/clients", "/reset", "/console/sign-in"} <= set(paths)
    async with asgi_client(ctx, api_key, reset_page=True) as api:
        for path, methods in paths.items():
            wrong = next(method for method in ("PATCH", "PUT") if method not in methods)  # a path may take PATCH
            response = await api.request(wrong, path)
            assert response.status_code == 405, path
            assert response.headers["Allow"] == ", ".join(sorted(methods)), path


def test_the_methods_of_a_path_come_from_every_route_that_serves_it(ctx: ServiceContext) -> None:
    routes = create_app(ctx, reset_page=True).routes
    assert allowed_methods(routes, "/v1/admin/clients", "PUT") == ["GET", "HEAD", "POST"]
    assert allowed_methods(routes, "/console/sign-in", "PUT") == ["GET", "HEAD", "POST"]
    assert allowed_methods(routes, "/v1/password-resets", "GET") == ["POST"]
    assert allowed_methods(routes, "/nowhere", "GET") == []
