"""`authledger users`: support actions on a user, short of erasure, each recorded with who acted and why."""

from __future__ import annotations

import click

from commands.output import CLI_CLIENT, cli_metadata, emit, json_option, tenant_option
from domain.support import support_reason
from infra.bootstrap import App
from infra.services import support as support_service

USER_ID = click.option("--user-id", required=True, help="The application's id for the user.")
REASON = click.option("--reason", required=True,
                      help="Why, for the record (a ticket, what the user said); one line, no email address.")
ACTOR = click.option("--actor", help="Who acts, for the record (default: $USER, else your OS account).")


@click.group()
def users() -> None:
    """Support actions on a user: withdraw their open links and codes, or send them a fresh one."""


@users.command("invalidate")
@USER_ID
@tenant_option
@REASON
@ACTOR
@json_option
@click.pass_obj
def users_invalidate(app: App, user_id: str, tenant: str, reason: str, actor: str | None, as_json: bool) -> None:
    """Withdraw the user's open reset links and codes; nothing is erased, and their queued emails are not sent."""
    support_reason(reason)  # refused before anything is read or written
    metadata = cli_metadata("users invalidate", actor)
    done = support_service.invalidate_user(app.services, tenant, user_id, reason=reason, metadata=metadata)
    said = (f"withdrew {len(done.request_ids)} reset link(s) and {len(done.challenge_ids)} code(s) of user "
            f"{user_id}" if done.request_ids or done.challenge_ids
            else f"user {user_id} has no open link or code; nothing changed")
    emit({**done.as_dict(), "tenant": tenant}, as_json, said)


@users.command("resend")
@USER_ID
@click.option("--flow", required=True, type=click.Choice(["reset", "otp"]),
              help="A reset link or a one-time code.")
@click.option("--purpose", help="For --flow otp: what the code is for (default: login).")
@tenant_option
@REASON
@ACTOR
@json_option
@click.pass_obj
def users_resend(app: App, user_id: str, flow: str, purpose: str | None, tenant: str, reason: str,
                 actor: str | None, as_json: bool) -> None:
    """Send the user a fresh link or code, to the address of their latest request, on the application's behalf."""
    support_reason(reason)
    metadata = cli_metadata("users resend", actor)
    resent = support_service.resend(app.services, tenant, user_id, flow=flow, reason=reason, purpose=purpose,
                                    client=CLI_CLIENT, metadata=metadata)
    data = resent.as_dict()
    what = "reset link" if flow == "reset" else "one-time code"
    said = (f"reused the open request {resent.outcome.request_id} (within the cooldown): no new email"
            if resent.outcome.reused
            else f"queued a fresh {what} for user {user_id}: request {resent.outcome.request_id}, message "
                 f"{resent.outcome.message_id}, expires {resent.outcome.expires_at.isoformat()}")
    emit({**data, "tenant": tenant}, as_json, said)
