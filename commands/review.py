"""`authledger history` and `authledger explain`: incident review of a user, a request or an email."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import click

from commands.output import emit, json_option, parse_instant, tenant_option
from infra.bootstrap import App
from infra.review import history as review_service


@click.command("history")
@click.option("--user-id", required=True, help="The application's id for the user.")
@click.option("--flow", type=click.Choice(["reset", "otp"]), help="One flow only.")
@click.option("--as-of", callback=parse_instant, help="As it stood at this moment, ISO 8601 (UTC if no offset).")
@tenant_option
@json_option
@click.pass_obj
def history_command(app: App, user_id: str, flow: str | None, as_of: datetime | None, tenant: str,
                    as_json: bool) -> None:
    """Everything that happened to a user's requests and emails, explained, then as a timeline."""
    review = review_service.history(app.read_engine, user_id, tenant=tenant, flow=flow, as_of=as_of,
                                    now=app.clock.now())
    emit(review.as_dict(), as_json, review.render())


@click.command("explain")
@click.option("--request-id", type=click.UUID, help="A reset request or OTP challenge.")
@click.option("--message-id", type=click.UUID, help="One email.")
@tenant_option
@json_option
@click.pass_obj
def explain_command(app: App, request_id: Any, message_id: Any, tenant: str, as_json: bool) -> None:
    """Why a link worked or not, and what happened to each email: sentences, then a timeline."""
    if (request_id is None) == (message_id is None):
        raise click.UsageError("give exactly one of --request-id or --message-id")
    review = review_service.explain(app.read_engine, request_id=request_id, message_id=message_id, tenant=tenant,
                                    now=app.clock.now())
    emit(review.as_dict(), as_json, review.render())
