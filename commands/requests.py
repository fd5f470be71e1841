"""`authledger reset` and `authledger otp`: the two request flows from the command line."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator

import click

from commands.output import CLI_CLIENT, cli_metadata, emit, json_option
from domain.errors import CodeRejected, IdempotencyMismatch
from domain.otp import RequestOtp
from domain.reset import RequestReset
from infra.services import otp as otp_service, reset as reset_service
from infra.bootstrap import App


@click.group()
def reset() -> None:
    """Password reset: request a link, verify or consume a token."""


@reset.command("request")
@click.option("--user-id", required=True, help="The application's id for the user.")
@click.option("--email", "recipient", required=True, help="Where to send the link.")
@click.option("--idempotency-key", help="Retries with the same key return the first answer.")
@json_option
@click.pass_obj
def reset_request(app: App, user_id: str, recipient: str, idempotency_key: str | None, as_json: bool) -> None:
    """Issue a reset link for a user and queue its email."""
    command = RequestReset(user_id, recipient, idempotency_key, CLI_CLIENT)
    with _explained_mismatch(idempotency_key, user_id, "a different email address"):
        outcome = reset_service.request_reset(app.services, command, cli_metadata("reset request"))
    data = {
        "request_id": str(outcome.request_id), "message_id": str(outcome.message_id),
        "expires_at": outcome.expires_at.isoformat(), "reused": outcome.reused,
    }
    said = "reused the open request" if outcome.reused else "queued a reset link"
    emit(data, as_json, f"{said}: request {data['request_id']}, message {data['message_id']}, "
                        f"expires {data['expires_at']}")


@reset.command("verify")
@click.argument("token")
@json_option
@click.pass_obj
def reset_verify(app: App, token: str, as_json: bool) -> None:
    """Check a token without consuming it."""
    request = reset_service.verify_token(app.services, token)
    data = {"valid": True, "request_id": str(request.request_id), "user_id": request.user_id,
            "expires_at": request.expires_at.isoformat()}
    emit(data, as_json, f"valid: request {data['request_id']} of user {request.user_id}, "
                        f"expires {data['expires_at']}")


@reset.command("consume")
@click.argument("token")
@json_option
@click.pass_obj
def reset_consume(app: App, token: str, as_json: bool) -> None:
    """Use a token once: the application is changing the password now."""
    outcome = reset_service.consume_token(app.services, token, cli_metadata("reset consume"))
    data = {"consumed": True, "request_id": str(outcome.request_id), "user_id": outcome.user_id,
            "completed_at": outcome.completed_at.isoformat()}
    emit(data, as_json, f"consumed: request {data['request_id']} of user {outcome.user_id}; "
                        "other open requests superseded, notice queued")


@contextlib.contextmanager
def _explained_mismatch(idempotency_key: str | None, user_id: str, what: str) -> Iterator[None]:
    """Name the key and what differs (never the stored value) when a key is reused."""
    try:
        yield
    except IdempotencyMismatch:
        raise IdempotencyMismatch(
            f"idempotency key {idempotency_key!r} was already used for user {user_id} with {what}; "
            "retry with the same parameters, or use a new key for a new request"
        ) from None


@click.group()
def otp() -> None:
    """Email one-time codes: request a challenge, verify a code."""


@otp.command("request")
@click.option("--user-id", required=True, help="The application's id for the user.")
@click.option("--email", "recipient", required=True, help="Where to send the code.")
@click.option("--purpose", default="login", show_default=True, help="What the code is for; shown in the email.")
@click.option("--idempotency-key", help="Retries with the same key return the first answer.")
@json_option
@click.pass_obj
def otp_request(app: App, user_id: str, recipient: str, purpose: str, idempotency_key: str | None,
                as_json: bool) -> None:
    """Issue a one-time code for a user and queue its email."""
    command = RequestOtp(user_id, recipient, purpose, idempotency_key, CLI_CLIENT)
    with _explained_mismatch(idempotency_key, user_id, "a different email address or purpose"):
        outcome = otp_service.request_otp(app.services, command, cli_metadata("otp request"))
    data = {
        "challenge_id": str(outcome.request_id), "message_id": str(outcome.message_id),
        "expires_at": outcome.expires_at.isoformat(), "reused": outcome.reused,
    }
    said = "reused the open challenge" if outcome.reused else "queued a one-time code"
    emit(data, as_json, f"{said}: challenge {data['challenge_id']}, message {data['message_id']}, "
                        f"expires {data['expires_at']}")


@otp.command("verify")
@click.argument("challenge_id")
@click.argument("code")
@json_option
@click.pass_obj
def otp_verify(app: App, challenge_id: str, code: str, as_json: bool) -> None:
    """Check a one-time code; it is accepted once. Exits non-zero when refused."""
    try:
        outcome = otp_service.verify_code(app.services, challenge_id, code, cli_metadata("otp verify"))
    except CodeRejected as error:
        if not as_json:
            raise
        emit({"verified": False, "attempts_left": error.attempts_left, "error": error.message}, True, "")
        sys.exit(error.exit_code)
    data = {"verified": True, "challenge_id": str(otp_service.parse_challenge_id(challenge_id)),
            "attempts_left": outcome.attempts_left}
    emit(data, as_json, f"verified: challenge {data['challenge_id']}")
