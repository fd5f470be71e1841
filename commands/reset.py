"""`authledger reset`: the password-reset flow from the command line."""

from __future__ import annotations

import re

import click

from commands.output import (
    CLI_CLIENT, cli_metadata, emit, explained_mismatch, json_option, locale_option, tenant_option,
)
from domain.reset import RequestReset
from domain.tenants import split_scoped_user
from infra.bootstrap import App
from infra.services import reset as reset_service


# A reset token is base64url of 32 bytes, 43 characters: one in 64 begins
# with "-", which click would read as an option ("No such option: -x").
DASHED_TOKEN = re.compile(r"-[A-Za-z0-9_-]{42}")


class TakesAToken(click.Command):
    """A command whose argument is a reset token: a word of a token's shape that begins with "-" is put
    behind "--", where click reads only arguments. Anything else, a mistyped option too, is parsed as given."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        dashed = [arg for arg in args if DASHED_TOKEN.fullmatch(arg)]
        if dashed and "--" not in args:
            args = [arg for arg in args if arg not in dashed] + ["--", *dashed]
        return super().parse_args(ctx, args)


@click.group()
def reset() -> None:
    """Password reset: request a link, verify or consume a token."""


@reset.command("request")
@click.option("--user-id", required=True, help="The application's id for the user.")
@click.option("--email", "recipient", required=True, help="Where to send the link.")
@click.option("--idempotency-key", help="Retries with the same key return the first answer.")
@click.option("--client-ip", help="The end user's IP address, for the per-IP limits (docs/limits.md).")
@locale_option
@tenant_option
@json_option
@click.pass_obj
def reset_request(app: App, user_id: str, recipient: str, idempotency_key: str | None, client_ip: str | None,
                  locale: str | None, tenant: str, as_json: bool) -> None:
    """Issue a reset link for a user and queue its email."""
    command = RequestReset(user_id, recipient, idempotency_key, CLI_CLIENT, tenant, locale)
    with explained_mismatch(idempotency_key, user_id, "a different email address"):
        outcome = reset_service.request_reset(app.services, command, cli_metadata("reset request"),
                                              client_ip=client_ip)
    data = {
        "request_id": str(outcome.request_id), "message_id": str(outcome.message_id),
        "expires_at": outcome.expires_at.isoformat(), "reused": outcome.reused,
    }
    said = "reused the open request" if outcome.reused else "queued a reset link"
    if outcome.replayed:  # the first answer again, as the HTTP API gives it
        said += " (a replay of this idempotency key)"
    emit(data, as_json, f"{said}: request {data['request_id']}, message {data['message_id']}, "
                        f"expires {data['expires_at']}")


@reset.command("verify", cls=TakesAToken)
@click.argument("token")
@tenant_option
@json_option
@click.pass_obj
def reset_verify(app: App, token: str, tenant: str, as_json: bool) -> None:
    """Check a token without consuming it."""
    request = reset_service.verify_token(app.services, token, cli_metadata("reset verify"), tenant=tenant)
    user_id = split_scoped_user(request.user_id)[1]
    data = {"valid": True, "request_id": str(request.request_id), "user_id": user_id,
            "expires_at": request.expires_at.isoformat()}
    emit(data, as_json, f"valid: request {data['request_id']} of user {user_id}, "
                        f"expires {data['expires_at']}")


@reset.command("consume", cls=TakesAToken)
@click.argument("token")
@tenant_option
@json_option
@click.pass_obj
def reset_consume(app: App, token: str, tenant: str, as_json: bool) -> None:
    """Use a token once: the application is changing the password now."""
    outcome = reset_service.consume_token(app.services, token, cli_metadata("reset consume"), tenant=tenant)
    user_id = split_scoped_user(outcome.user_id)[1]
    data = {"consumed": True, "request_id": str(outcome.request_id), "user_id": user_id,
            "completed_at": outcome.completed_at.isoformat()}
    emit(data, as_json, f"consumed: request {data['request_id']} of user {user_id}; "
                        "other open requests superseded, notice queued")
