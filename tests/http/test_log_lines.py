"""The request log line through the whole ASGI stack: a hostile path cannot forge a line."""

from __future__ import annotations

import json

import httpx
import pytest

from domain.tokens import hash_token
from tests.support.log_lines import logged_lines

pytestmark = pytest.mark.anyio

FORGING = "/v1/timeline%0a2026-01-01T00:00:00+00:00%09level=error%09event=%22admin%20login%22%0d%1b[2K"


async def test_a_request_path_with_newlines_and_tabs_prints_escaped_on_its_own_line(
    api: httpx.AsyncClient,
) -> None:
    with logged_lines("text") as lines:
        response = await api.get(FORGING)

    assert response.status_code == 404
    [line] = lines()  # one request, one line
    assert (r' event="http request" method=GET path="/v1/timeline\n2026-01-01T00:00:00+00:00'
            r'\tlevel=error\tevent=\"admin login\"\r\x1b[2K" status=404 ') in line
    assert line.isprintable()


async def test_the_same_request_logged_as_json_is_valid_json_with_the_path_intact(api: httpx.AsyncClient) -> None:
    with logged_lines("json") as lines:
        await api.get(FORGING)

    [line] = lines()
    logged = json.loads(line)
    assert (logged["event"], logged["status"]) == ("http request", 404)
    assert logged["path"] == '/v1/timeline\n2026-01-01T00:00:00+00:00\tlevel=error\tevent="admin login"\r\x1b[2K'


async def test_an_authenticated_requests_line_names_the_client_and_the_key_id_never_the_key(
    api: httpx.AsyncClient, api_key: str,
) -> None:
    with logged_lines("json") as lines:
        response = await api.get("/v1/timeline", params={"user_id": "42"})

    [line] = lines()
    logged = json.loads(line)
    assert response.status_code == 200 and logged["key_id"].startswith("key_") and logged["client"]
    assert api_key not in line and hash_token(api_key) not in line
