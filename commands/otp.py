"""`authledger otp`: the email one-time-code flow from the command line."""

from __future__ import annotations

import sys

import click

from commands.output import (
    CLI_CLIENT, cli_metadata, emit, explained_mismatch, json_option, locale_option, tenant_option,
)
from domain.errors import CodeRejected
from domain.otp import RequestOtp
from infra.bootstrap import App
from infra.services import otp as otp_service


@click.group()
def otp() -> None:
    """Email one-time codes: request a challenge, verify a code."""


@otp.command("request")
@click.option("--user-id", required=True, help="The application's id for the user.")
@click.option("--email", "recipient", required=True, help="Where to send the code.")
@click.option("--purpose", default="login", show_default=True,
              help="What the code is for: a purpose the tenant allows (`tenants show`); the email shows its text.")
@click.option("--idempotency-key", help="Retries with the same key return the first answer.")
@click.option("--client-ip", help="The end user's IP address, for the per-IP limits (docs/limits.md).")
@locale_option
@tenant_option
@json_option
@click.pass_obj
def otp_request(app: App, user_id: str, recipient: str, purpose: str, idempotency_key: str | None,
                client_ip: str | None, locale: str | None, tenant: str, as_json: bool) -> None:
    """Issue a one-time code for a user and queue its email."""
    command = RequestOtp(user_id, recipient, purpose, idempotency_key, CLI_CLIENT, tenant, locale)
    with explained_mismatch(idempotency_key, user_id, "a different email address or purpose"):
        outcome = otp_service.request_otp(app.services, command, cli_metadata("otp request"), client_ip=client_ip)
    data = {
        "challenge_id": str(outcome.request_id), "message_id": str(outcome.message_id),
        "expires_at": outcome.expires_at.isoformat(), "reused": outcome.reused,
    }
    said = "reused the open challenge" if outcome.reused else "queued a one-time code"
    if outcome.replayed:  # the first answer again, as the HTTP API gives it
        said += " (a replay of this idempotency key)"
    emit(data, as_json, f"{said}: challenge {data['challenge_id']}, message {data['message_id']}, "
                        f"expires {data['expires_at']}")


@otp.command("verify")
@click.argument("challenge_id")
@click.argument("code")
@click.option("--user-id", required=True, help="The user the code was sent to; another user's challenge is refused.")
@click.option("--purpose", help="When given, the challenge must have been issued for this purpose.")
@tenant_option
@json_option
@click.pass_obj
def otp_verify(app: App, challenge_id: str, code: str, user_id: str, purpose: str | None, tenant: str,
               as_json: bool) -> None:
    """Check a one-time code; it is accepted once. Exits non-zero when refused.

    A challenge of another user, purpose or tenant is refused exactly like an
    unknown one, and counts no attempt.
    """
    try:
        outcome = otp_service.verify_code(app.services, challenge_id, code, cli_metadata("otp verify"),
                                          user_id=user_id, purpose=purpose, tenant=tenant)
    except CodeRejected as error:
        if not as_json:
            raise
        emit({"verified": False, "attempts_left": error.attempts_left, "error": error.message}, True, "")
        sys.exit(error.exit_code)
    data = {"verified": True, "challenge_id": str(otp_service.parse_challenge_id(challenge_id)),
            "attempts_left": outcome.attempts_left}
    emit(data, as_json, f"verified: challenge {data['challenge_id']}")
