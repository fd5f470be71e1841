"""What the console shows about a user, request or message: found through the one lookup, for one tenant.

The events come from ``infra.review.lookup`` (as for ``history``, ``explain``
and ``GET /v1/timeline``); the sentences and the timeline from
``infra.review.history``, the very functions the CLI prints, so the page
says word for word what ``authledger explain`` says.

A caller sees only its tenant: a user id is scoped with the caller's tenant
before the lookup, and a request or message is shown only when the user it
belongs to is of that tenant. Anything else is "nothing found", the same
answer as for an id that never existed.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime
from uuid import UUID

from attrs import frozen
from sqlalchemy import Engine

from domain.errors import ConfigError, InvalidInput, NotFound
from domain.log import RecordedEvent
from domain.tenants import scoped_user, split_scoped_user
from infra.review.history import Review, explain, explain_delivery, history_and_events
from infra.review.lookup import Story, about_message, about_request, about_user, looking_up, of_tenant

KINDS = ("user", "request", "message")
PRINTABLE = re.compile(r"[!-~]{1,200}")  # a user id as the API accepts it
# The address search: given the caller's tenant and an address, the tenant-local
# ids of that tenant's users whose requests went to it (the keyed-hash index,
# ``infra.services.address_index.users_by_address``). ``InvalidInput`` for what
# is no address.
AddressIndex = Callable[[str, str], list[str]]


def no_address_index(tenant: str, address: str) -> list[str]:
    """An index that finds nobody (for consoles built without keys)."""
    return []


@frozen
class Case:
    kind: str  # "user", "request" or "message"
    value: str  # as the caller typed it: the tenant-local user id, or the UUID
    user_id: str | None  # tenant-local
    review: Review
    events: list[RecordedEvent]  # what the lookup says the case is about, in log order


def _uuid(value: str) -> UUID | None:
    try:
        found = UUID(value)
    except ValueError:
        return None
    return found if str(found) == value.lower() else None


def find_case(engine: Engine, tenant: str, kind: str, value: str, *, now: datetime) -> Case | None:
    """The case of ``value`` as a ``kind`` id, seen from ``tenant``; None when there is nothing to see."""
    if kind == "user":
        return _user_case(engine, tenant, value, now) if PRINTABLE.fullmatch(value) else None
    found = _uuid(value)
    story = _story(engine, tenant, kind, found) if found is not None else None
    if story is None and kind == "message" and found is not None:
        delivery = explain_delivery(engine, found, tenant=tenant)  # a webhook delivery: no user, each attempt
        return None if delivery is None else Case(kind, str(found), None, *delivery)
    if story is None or story.user_id is None:
        return None
    try:
        review = explain(engine, **{f"{kind}_id": found}, tenant=tenant, now=now)
    except NotFound:
        return None
    return Case(kind, str(found), split_scoped_user(story.user_id)[1], review, story.events)


def _story(engine: Engine, tenant: str, kind: str, found: UUID) -> Story | None:
    """The lookup's story of a request or message, if it belongs to a user of ``tenant``."""
    if kind not in ("request", "message"):
        return None
    with looking_up(engine) as lookup:
        story = about_request(lookup, found, tenant) if kind == "request" else about_message(lookup, found, tenant)
    story = of_tenant(story, tenant)
    return story if story is not None and story.user_id is not None else None


def _user_case(engine: Engine, tenant: str, user_id: str, now: datetime) -> Case | None:
    try:  # the CLI's `history --tenant T USER`: the same sentences, from one read of the lookup
        review, events = history_and_events(engine, user_id, tenant=tenant, now=now)
    except (NotFound, InvalidInput):
        return None
    return Case("user", user_id, user_id, review, events)


def search(engine: Engine, tenant: str, query: str, *,
           address_index: AddressIndex = no_address_index) -> tuple[str, str] | list[str] | None:
    """Where a search lands: ``(kind, value)`` of the first case found, trying each kind of id in turn.

    A UUID is tried as a request, then a message, then a user id (applications use UUIDs for users too);
    an address (it has an @) goes through ``address_index``: one user lands on that user's case, several
    are answered as the list of their tenant-local ids to choose from; anything else is a user id.
    """
    query = query.strip()
    if not query:
        return None
    if "@" in query:
        try:
            users = address_index(tenant, query)
        except (InvalidInput, ConfigError):  # not an address; or a server without token keys has no index
            users = []
        if len(users) == 1:
            return "user", users[0]
        if users:
            return users
    found = _uuid(query)
    kinds = ("request", "message", "user") if found is not None else ("user",)
    value = str(found) if found is not None else query
    for kind in kinds:
        if kind == "user":
            if PRINTABLE.fullmatch(value) and _has_user(engine, scoped_user(tenant, value)):
                return kind, value
        elif found is not None and _story(engine, tenant, kind, found) is not None:
            return kind, value
    return None


def _has_user(engine: Engine, scoped: str) -> bool:
    with looking_up(engine) as lookup:
        return bool(about_user(lookup, scoped))
