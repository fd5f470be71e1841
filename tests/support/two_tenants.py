"""Two tenants on one real server: acme and shop, each with one key per scope, playing their users.

The app runs under uvicorn on a free port in a thread of the test process, so
its log lines go through authledger's real handler (which a test may
capture), and the test talks to it over a real socket with httpx. Emails are
delivered by the real worker into a recording provider, from which a test
reads the link or code as the user would.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import parse_qs, urlsplit
from uuid import UUID, uuid4

import attrs
import httpx
from sqlalchemy import Engine, text

from domain.clients import OPERATOR, TENANT_SCOPES
from domain.policy import OtpPolicy
from infra.delivery.worker import Worker
from infra.http.app import create_app
from infra.services.clients import create_client
from infra.services.tenants import create_tenant
from infra.services.unit_of_work import ServiceContext, random_nonce
from tests.support.mailers import RecordingMailer
from tests.support.servers import served

SENDER = "authledger <no-reply@app.test>"
# Ten digits: a six-digit code could turn up by chance among the digits of
# timestamps and ids in a dump or a log, and a secrets test would fail for nothing.
DIGITS = 10
EVENTS_DIGEST = text("""
    SELECT count(*) AS n, md5(coalesce(string_agg(e::text, E'\\n' ORDER BY e.global_position), '')) AS digest
      FROM events e
""")


def events_digest(engine: Engine) -> tuple[int, str]:
    """The number of events and an md5 of every column of every row, in log order."""
    with engine.connect() as connection:
        row = connection.execute(EVENTS_DIGEST).one()
    return row.n, row.digest




@attrs.frozen
class Tenant:
    """A tenant's name and one client per scope (``acme-send``, ``acme-verify``, ...) with its key."""

    name: str
    keys: dict[str, str]

    def client_name(self, scope: str) -> str:
        return f"{self.name}-{scope}"


@attrs.define
class TwoTenants:
    """The server, the two tenants, and every secret the flows produced (for the secrets-at-rest checks)."""

    ctx: ServiceContext
    base: str
    acme: Tenant
    shop: Tenant
    mailer: RecordingMailer = attrs.field(factory=RecordingMailer)
    nonces: list[str] = attrs.field(factory=list)
    tokens: list[str] = attrs.field(factory=list)
    codes: list[str] = attrs.field(factory=list)
    api_keys: list[str] = attrs.field(factory=list)
    addresses: list[str] = attrs.field(factory=list)
    operator_key: str = ""  # the deployment's own key (default tenant, scope operator), as the CLI grants it

    def call(self, tenant: Tenant | None, scope: str | None, method: str, path: str,
             body: object | None = None, **params: str) -> httpx.Response:
        """One HTTP call to the real server with ``tenant``'s ``scope`` key (none when either is None)."""
        headers = {"Authorization": f"Bearer {tenant.keys[scope]}"} if tenant and scope else {}
        if method == "POST":
            headers["Idempotency-Key"] = str(uuid4())
        return httpx.request(method, self.base + path, json=body, headers=headers, params=params or None,
                             timeout=30)

    def deliver(self) -> None:
        Worker(self.ctx, self.mailer, sender=SENDER).drain()

    def _body_of(self, message_id: str) -> str:
        self.deliver()
        [email] = [e for e in self.mailer.emails if str(e.message_id) == message_id]
        return email.text_body

    def request_reset(self, tenant: Tenant, user_id: str, email: str,
                      locale: str | None = None) -> tuple[dict[str, Any], str]:
        """A reset requested with ``tenant``'s send key (in the user's ``locale``), and the token its email carries."""
        body = {"user_id": user_id, "email": email, **({"locale": locale} if locale else {})}
        response = self.call(tenant, "send", "POST", "/v1/password-resets", body)
        assert response.status_code == 202, response.text
        created = response.json()
        link = next(line for line in self._body_of(created["message_id"]).splitlines() if "token=" in line)
        token = parse_qs(urlsplit(link.strip()).query)["token"][0]
        self.tokens.append(token)
        self.addresses.append(email)
        return created, token

    def request_code(self, tenant: Tenant, user_id: str, email: str, purpose: str) -> tuple[dict[str, Any], str]:
        """A challenge created with ``tenant``'s send key, and the code its email carries."""
        response = self.call(tenant, "send", "POST", "/v1/otp/challenges",
                             {"user_id": user_id, "email": email, "purpose": purpose})
        assert response.status_code == 202, response.text
        created = response.json()
        body = self._body_of(created["message_id"])
        code = next(line.strip() for line in body.splitlines() if line.strip().isdigit())
        assert len(code) == DIGITS
        self.codes.append(code)
        self.addresses.append(email)
        return created, code


@contextmanager
def two_tenants(ctx: ServiceContext) -> Iterator[TwoTenants]:
    """acme and shop, each with a send, verify, review, admin and metrics client, on a real server.

    And the operator's key (``operator_key``): a client ``prometheus`` of the
    default tenant holding the ``operator`` scope, which only the CLI grants.

    Every nonce the service draws is recorded, so that a test can look for it
    where it must not be; codes are ten digits for the same reason.
    """
    nonces: list[str] = []

    def recorded_nonce() -> str:
        nonces.append(random_nonce())
        return nonces[-1]

    ctx = attrs.evolve(ctx, otp_policy=OtpPolicy(digits=DIGITS), new_nonce=recorded_nonce)
    tenants = []
    for name in ("acme", "shop"):
        create_tenant(ctx, name)
        keys = {scope: create_client(ctx, f"{name}-{scope}", tenant=name, scopes=[scope]).api_key
                for scope in TENANT_SCOPES}
        tenants.append(Tenant(name, keys))
    operator_key = create_client(ctx, "prometheus", scopes=[OPERATOR]).api_key
    with served(create_app(ctx)) as base:
        world = TwoTenants(ctx, base, tenants[0], tenants[1], nonces=nonces, operator_key=operator_key)
        world.api_keys.extend([*(key for tenant in tenants for key in tenant.keys.values()), operator_key])
        yield world


def unknown_id() -> str:
    return str(UUID(int=uuid4().int))
