"""The suppression list at work: refusing a create to a suppressed address, listing, lifting.

A create's recipient is hashed under every configured token key
(``infra.services.address_index.candidate_hmacs``), so an address suppressed
before a key rotation stays suppressed for as long as its key is configured,
and its hashes are looked up in the ``suppressions`` projection of the
create's tenant, in the create's own transaction, only when the decision
queues an email: a replayed idempotency key still answers its first outcome.
The refusal (``RecipientSuppressed``) rolls the transaction back, so a
refused create writes nothing.

Lifting is an admin's act, with a reason: one ``SuppressionLifted`` per
suppressed hash of the address, on each suppressing user's
``suppression:`` stream.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from attrs import frozen
from sqlalchemy import Connection, text

from domain.errors import NotFound, RecipientSuppressed
from domain.suppression import decide_lift, lift_reason, suppression_stream
from domain.tenants import check_tenant_name, split_scoped_user
from domain.tokens import TokenKeys
from infra.db.pipeline import Pending, execute_deferred, execute_read
from infra.errors import RateLimited
from infra.services.address_index import candidate_hmacs
from infra.services.feedback import sealing_for
from infra.services.unit_of_work import Admit, ServiceContext, decide_events_on_stream

# The GIN index suppressions_hashes (schema.sql) answers the overlap: the
# expression must stay exactly string_to_array(hashes, ' ').
SUPPRESSED = text("""
    SELECT user_id, hashes FROM suppressions
     WHERE string_to_array(hashes, ' ') && CAST(:candidates AS text[]) AND tenant = :tenant
     ORDER BY user_id
""")
LISTED = text("""
    SELECT user_id, hashes, reason, message_id, suppressed_at FROM suppressions
     WHERE tenant = :tenant AND hashes <> ''
     ORDER BY suppressed_at DESC, user_id
""")


@frozen
class Suppression:
    """One user's suppressed addresses, as the list shows them: never the address, only how many and why."""

    user_id: str  # as the tenant knows it
    addresses: int
    reason: str | None  # of the latest: "bounce" or "complaint"
    message_id: str | None
    suppressed_at: datetime | None

    def as_dict(self) -> dict[str, Any]:
        return {"user_id": self.user_id, "addresses": self.addresses, "reason": self.reason,
                "message_id": self.message_id,
                "suppressed_at": self.suppressed_at.isoformat() if self.suppressed_at else None}


def suppression_admission(keys: TokenKeys, *, tenant: str, recipient: str, then: Admit | None) -> Admit:
    """What a create checks before its decision is appended: a recipient on the list refuses the email
    (``RecipientSuppressed``), then ``then`` (the limits' counters).

    The look-up is sent ahead of the counters and its answer comes back with
    theirs: it costs the create a statement, not a wait. A suppressed address
    is refused as such even when a counter is full too: that refusal says
    what a retry cannot change.
    """
    candidates = candidate_hmacs(keys, recipient)
    params = {"candidates": candidates, "tenant": tenant}

    def admit(connection: Connection, decision: Any, now: datetime) -> None:
        if not getattr(decision, "emails", None):
            if then is not None:
                then(connection, decision, now)
            return
        asked = execute_deferred(connection, SUPPRESSED, params, answer=True)
        try:
            if then is not None:
                then(connection, decision, now)
        except RateLimited:
            _refuse_if_suppressed(connection, asked, params)
            raise
        _refuse_if_suppressed(connection, asked, params)

    return admit


def _refuse_if_suppressed(connection: Connection, asked: Pending, params: dict[str, Any]) -> None:
    # No counter waited (none applied): ask again, and wait for it now.
    rows = asked.all() if asked.answered else execute_read(connection, SUPPRESSED, params)
    if rows:
        raise RecipientSuppressed()


def list_suppressions(ctx: ServiceContext, tenant: str) -> list[Suppression]:
    """The tenant's suppressed users, newest suppression first."""
    check_tenant_name(tenant)
    with ctx.engine.connect() as connection:
        rows = connection.execute(LISTED, {"tenant": tenant}).all()
    return [Suppression(split_scoped_user(row.user_id)[1], len(row.hashes.split()), row.reason,
                        str(row.message_id) if row.message_id else None, row.suppressed_at) for row in rows]


def lift(
    ctx: ServiceContext, tenant: str, address: str, *, actor: str, reason: str,
    metadata: Mapping[str, Any] | None = None,
) -> int:
    """Lift every suppression of ``address`` in ``tenant``; how many hashes were lifted.

    ``NotFound`` (nothing written) when the address is not suppressed there;
    ``InvalidInput`` for a blank reason or one that holds an address.
    """
    check_tenant_name(tenant)
    reason = lift_reason(reason)
    candidates = set(candidate_hmacs(ctx.keys, address))
    with ctx.engine.connect() as connection:
        found = connection.execute(SUPPRESSED, {"candidates": sorted(candidates), "tenant": tenant}).all()
    if not found:
        raise NotFound("that address is not on this tenant's suppression list")
    lifted = sum(_lift_one(ctx, row.user_id, sorted(set(row.hashes.split()) & candidates), actor=actor,
                           reason=reason, metadata=metadata) for row in found)
    if not lifted:  # lifted or erased meanwhile, by someone who came first
        raise NotFound("that address is not on this tenant's suppression list")
    return lifted


ROW_HASHES = text("SELECT hashes FROM suppressions WHERE user_id = :user_id")


def _lift_one(ctx: ServiceContext, user_id: str, hashes: list[str], *, actor: str, reason: str,
              metadata: Mapping[str, Any] | None) -> int:
    """Lift ``hashes`` of one user, those still suppressed once the user's locks are held: an erasure or
    another lift that came first leaves nothing to lift (and nothing is sealed again under a new key)."""
    still: list[str] = []
    locked = sealing_for(user_id, suppression_stream(user_id))

    def stream_of(connection: Connection) -> str:
        stream_id = locked(connection)
        current = set((connection.execute(ROW_HASHES, {"user_id": user_id}).scalar() or "").split())
        still[:] = [h for h in hashes if h in current]
        return stream_id

    return len(decide_events_on_stream(
        ctx, stream_of, list, lambda _history, now: decide_lift(user_id, still, actor=actor, reason=reason, now=now),
        metadata))
