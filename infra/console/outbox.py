"""What the console's outbox page shows a tenant, and whose a message is before anyone re-drives it.

The chart counts every tenant's mail (``delivery_messages`` keeps no user: it
is the operator's picture of the service's sending, and it names nobody). The
lists name messages, so each keeps only the caller's tenant's, and a re-drive
is refused for a message of another tenant exactly as for one that never
existed.

Each listed message says why it is there in the console's words (times to
the second, the command to run apart from the sentence); a failed or
abandoned one also says, before anyone re-drives it, when the worker would
skip it: its request read now as the worker reads it right before a send
(``domain.reset.reset_delivery_verdict`` / ``domain.otp.otp_delivery_verdict``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

from attrs import frozen
from sqlalchemy import Engine, text

from domain import otp, otp_events, otp_state, reset, reset_events, reset_state
from domain.tenants import tenant_of
from infra.db.replica import ReplicaLag, replica_lag_of
from infra.delivery.overview import attention_lists, hourly_counts
from infra.eventlog.personal_data import ERASED
from infra.projector.snapshots import Lookups
from infra.services.unit_of_work import ServiceContext, load_states
from projections.outbox_chart import render_outbox_chart

OWNERS = text("SELECT message_id, user_id FROM email_outbox WHERE message_id = ANY(CAST(:ids AS uuid[]))")
REQUESTS = text("SELECT message_id, flow, template, user_id, request_id FROM email_outbox "
                "WHERE message_id = ANY(CAST(:ids AS uuid[]))")
OWNER = text("SELECT user_id FROM email_outbox WHERE message_id = :message_id")
LISTS = (("retrying", "Waiting for a retry"), ("stuck", "Stuck"), ("failed", "Failed"), ("abandoned", "Abandoned"),
         ("unknown", "Outcome unknown"))


GIVEN_UP = ("failed", "abandoned")  # the lists whose messages may be re-driven
# Why the worker would skip a message re-driven now, by its verdict; another verdict is named as it is.
SKIPPED_BECAUSE = {
    "superseded": "a newer request replaced its request",
    "consumed": "its link was used already",
    "verified": "its code was used already",
    "expired": "its link or code has expired",
    "locked": "its code can no longer be entered (locked)",
    "erased": "its user's personal data was erased",
    "invalidated": "its links and codes were invalidated",
    "unknown_request": "its request is not in the log",
    "not_completed": "its request was never completed",
}


@frozen
class OutboxView:
    chart: str  # the SVG
    # As attention_lists gives them, only the tenant's messages, each with "why" (a sentence), "command"
    # (to run, or None) and, for a failed or abandoned one, "skip" (why a re-drive would not send it, or None).
    lists: dict[str, list[dict[str, Any]]]
    replica: ReplicaLag | None = None  # read from the read replica, at least this far behind; None: the primary


def when(iso: str | None) -> str:
    """``2024-05-01 10:05:00 UTC``: to the second, as the page shows times."""
    if not iso:
        return "-"
    return datetime.fromisoformat(iso).astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def why(message: dict[str, Any]) -> tuple[str, str | None]:
    """Why a message is listed, in a sentence, and the command that acts on it (None: nothing to run)."""
    kind, attempts = message["kind"], message["attempts"]
    if kind == "retrying":
        return (f"Its next attempt is due at {when(message.get('next_attempt_at'))}, after {attempts} failed "
                f"attempt{'s' if attempts != 1 else ''}.", None)
    if kind == "expired_lease":
        return (f"The lease of {message.get('lease_owner')} ran out at {when(message.get('lease_expired_at'))} and "
                "no worker has reclaimed it: are workers running?", None)
    if kind == "unclaimed":
        return (f"Queued and due since {when(message.get('due_since'))}, but no worker has claimed it: are workers "
                "running?", None)
    return (f"{message['state'].capitalize()} at {when(message.get('finished_at'))} after {attempts} "
            f"attempt{'s' if attempts != 1 else ''}; a re-drive sends it again.",
            f"authledger outbox retry --message-id {message['message_id']}")


def outbox_view(ctx: ServiceContext, tenant: str, *, now: datetime) -> OutboxView:
    """The 24 h chart and the lists that need an operator, the lists cut to ``tenant``'s messages."""
    engine = ctx.read_engine
    replica = replica_lag_of(engine)  # before the reads it describes, so that none of them is older than it says
    chart = render_outbox_chart(hourly_counts(engine, now=now))
    lists = attention_lists(engine, now=now)
    ids = [message["message_id"] for found in lists.values() for message in found]
    with engine.connect() as connection:
        owners = {str(row.message_id): row.user_id for row in connection.execute(OWNERS, {"ids": ids})} if ids else {}
    mine = {name: [m for m in found if tenant_of(owners.get(m["message_id"], "")) == tenant
                   and m["message_id"] in owners]
            for name, found in lists.items()}
    skips = skip_verdicts(ctx, [m["message_id"] for name in GIVEN_UP for m in mine[name]], now=now)
    return OutboxView(chart, {name: [{**m, **dict(zip(("why", "command"), why(m), strict=True)),
                                      "skip": skips.get(m["message_id"]) if name in GIVEN_UP else None}
                                     for m in found]
                              for name, found in mine.items()}, replica)


def skip_verdicts(ctx: ServiceContext, message_ids: Iterable[str], *, now: datetime) -> dict[str, str]:
    """Why the worker would skip each of these messages if it were re-driven now (absent: it would be sent).

    The worker's own verdict on the request's stream, read as it reads it right before a send.
    """
    ids = list(message_ids)
    if not ids:
        return {}
    with ctx.engine.connect() as connection:
        rows = list(connection.execute(REQUESTS, {"ids": ids}))
    streams = {str(row.message_id): _stream_of(row.flow, row.user_id) for row in rows}
    folds = {stream: fold for stream, fold in streams.values() if stream and fold}
    asked: dict[str, list[UUID]] = {}
    for row in rows:
        stream, _ = streams[str(row.message_id)]
        if stream:
            asked.setdefault(stream, []).append(row.request_id)
    states = load_states(ctx, folds, None, {stream: Lookups(request_ids=tuple(found))
                                            for stream, found in asked.items()})
    verdicts: dict[str, str] = {}
    for row in rows:
        stream, _ = streams[str(row.message_id)]
        verdict = _verdict(row, states[stream], now) if stream else "unknown_request"
        if verdict:
            verdicts[str(row.message_id)] = SKIPPED_BECAUSE.get(verdict, f"the worker would skip it ({verdict})")
    return verdicts


def _stream_of(flow: str, user_id: str) -> tuple[str | None, Callable[[Iterable[object]], Any] | None]:
    if flow == "reset":
        return reset_events.reset_stream(user_id), reset_state.fold_reset
    if flow == "otp":
        return otp_events.otp_stream(user_id), otp_state.fold_otp
    return None, None


def _verdict(row: Any, state: Any, now: datetime) -> str | None:
    """The worker's verdict on sending this message now: None, or why it would skip it."""
    if row.flow == "reset":
        verdict = reset.reset_delivery_verdict(state, row.request_id, now=now, template=row.template)
        request = None if verdict else state.requests[row.request_id]
    else:
        verdict = otp.otp_delivery_verdict(state, row.request_id, now=now)
        request = None if verdict else state.challenges[row.request_id]
    return verdict or ("erased" if request is not None and request.recipient == ERASED else None)


def message_of_tenant(engine: Engine, tenant: str, message_id: UUID) -> bool:
    """Whether ``message_id`` is in the outbox and belongs to a user of ``tenant``."""
    with engine.connect() as connection:
        owner = connection.execute(OWNER, {"message_id": message_id}).scalar_one_or_none()
    return owner is not None and tenant_of(owner) == tenant
