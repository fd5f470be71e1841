"""The authledger command line: parse, call a service function, print.

The root group builds the ``App`` into ``ctx.obj``; every command takes it
with ``pass_obj``. Any ``AuthledgerError`` becomes one line on stderr and the
error's exit code: no traceback reaches a user.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import click

from domain.errors import AuthledgerError, CodeRejected, IdempotencyMismatch, InvalidInput, ProjectionMismatch
from domain.otp import RequestOtp
from domain.reset import RequestReset
from infra import otp_service, reset_service
from infra import audit as audit_service
from infra import sealer
from infra.audit_digest import (
    check_trust, configured_public_key, parse_public_key, read_digest_file, signing_key, write_digest_file,
)
from infra.audit_export import export as export_log
from infra.audit_export import events_in_export, stretch_for_times, verify_export
from infra.bootstrap import App
from infra.config import masked
from infra.embedded import stop_on_sigterm
from infra.http import clients as client_service
from infra.logs import configure_logging
from infra.outbox_status import outbox_status, stuck_messages
from infra.privacy import forget as forget_subject
from infra.schema import check_schema, init_schema
from infra.worker import Worker
from infra import history as review_service
from infra.catchup import CatchUpRunner
from infra.delivery_stats import as_rows as as_report_rows
from infra.delivery_stats import delivery_report, render_report, report_as_of
from infra.log_reader import as_of as log_as_of
from infra.log_reader import to_position as log_to_position
from infra.projection_registry import Projection, all_projections, projection_named
from infra.projection_status import projection_status, render_status
from infra.rebuild import log_length
from infra.rebuild import rebuild as rebuild_projection
from infra.replay_schema import drop_replay, replay_into
from infra.verify import verify as verify_projection


class UserFacingError(click.ClickException):
    def __init__(self, error: AuthledgerError) -> None:
        super().__init__(error.message)
        self.exit_code = error.exit_code


class AuthledgerGroup(click.Group):
    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except AuthledgerError as error:
            raise UserFacingError(error) from None


def emit(data: Any, as_json: bool, text: str) -> None:
    click.echo(json.dumps(data, indent=2, default=str) if as_json else text)


json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON for tools.")


@click.group(cls=AuthledgerGroup)
@click.option("--database-url", envvar="DATABASE_URL", help="PostgreSQL URL; embedded server when absent.")
@click.option("--data-dir", envvar="AUTHLEDGER_DATA_DIR", help="Where the embedded server and Maildir live.")
@click.pass_context
def cli(ctx: click.Context, database_url: str | None, data_dir: str | None) -> None:
    """authledger: password-reset and email-OTP delivery on an append-only log."""
    app = App.from_environment(os.environ, {"database_url": database_url, "data_dir": data_dir})
    ctx.obj = app
    ctx.call_on_close(app.close)


@cli.group()
def db() -> None:
    """Create and check the database schema."""


@db.command("init")
@json_option
@click.pass_obj
def db_init(app: App, as_json: bool) -> None:
    """Apply schema.sql (safe to run again)."""
    result = init_schema(app.admin_engine)
    said = "already initialised; schema re-applied, nothing changed" if result.already_initialised else "initialised"
    emit(
        {"version": result.version, "already_initialised": result.already_initialised,
         "database": app.database.display_url},
        as_json,
        f"database {app.database.display_url}: {said} (schema version {result.version})",
    )


@db.command("check")
@json_option
@click.pass_obj
def db_check(app: App, as_json: bool) -> None:
    """Report schema version, append-only guards and the transaction-id horizon."""
    report = check_schema(app.admin_engine)
    data = {
        "ok": report.ok,
        "schema_version": report.schema_version,
        "expected_version": report.expected_version,
        "guards": report.guards,
        "app_role_privileges": report.app_role_privileges,
        "highest_logged_xid": report.highest_logged_xid,
        "next_xid": report.next_xid,
        "problems": report.problems,
    }
    lines = [
        f"schema version   {report.schema_version} (expected {report.expected_version})",
        "append-only      " + ", ".join(f"{name} {'on' if on else 'MISSING'}" for name, on in report.guards.items()),
        "app role         " + ", ".join(f"{p} {'yes' if g else 'no'}" for p, g in report.app_role_privileges.items()),
        f"transaction ids  next {report.next_xid}, highest in log {report.highest_logged_xid}",
    ]
    lines += [f"problem: {problem}" for problem in report.problems]
    lines.append("ok" if report.ok else "NOT OK")
    emit(data, as_json, "\n".join(lines))
    if not report.ok:
        sys.exit(1)


@cli.group()
def config() -> None:
    """Inspect the effective configuration."""


@config.command("show")
@json_option
@click.pass_obj
def config_show(app: App, as_json: bool) -> None:
    """Print the effective configuration, secrets masked."""
    shown = masked(app.settings)
    emit(shown, as_json, "\n".join(f"{name}={value}" for name, value in shown.items()))


CLI_CLIENT = "cli"


def cli_metadata(command: str) -> dict[str, str]:
    return {"actor": f"cli:{os.environ.get('USER', 'unknown')}", "client": CLI_CLIENT, "command": command}


@cli.group()
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


@cli.group()
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


@cli.command()
@click.option("--concurrency", default=1, show_default=True, type=click.IntRange(1, 64))
@click.option("--batch", default=10, show_default=True, type=click.IntRange(1, 1000))
@click.option("--once", is_flag=True, help="Deliver everything due now, then exit.")
@json_option
@click.pass_obj
def worker(app: App, concurrency: int, batch: int, once: bool, as_json: bool) -> None:
    """Claim due emails and deliver them."""
    configure_logging(app.settings.log_format)
    delivery = Worker(app.services, app.mailer, sender=app.settings.sender, batch=batch,
                      concurrency=concurrency, poll_seconds=app.settings.poll_seconds)
    if once:
        tally = delivery.drain()
        emit(tally, as_json, ", ".join(f"{state}: {n}" for state, n in sorted(tally.items())) or "nothing due")
        return
    stop_on_sigterm()
    delivery.run()


@cli.group()
def outbox() -> None:
    """Inspect outbound email."""


@outbox.command("status")
@json_option
@click.pass_obj
def outbox_status_command(app: App, as_json: bool) -> None:
    """Messages by state, and the oldest due one."""
    status = outbox_status(app.engine, now=app.clock.now())
    lines = [f"{state:<10} {count}" for state, count in status["by_state"].items()]
    lines.append(f"due now    {status['due_now']} (oldest due {status['oldest_due_seconds']} s ago)")
    emit(status, as_json, "\n".join(lines))


def _progress(length: int, label: str) -> Any:
    """A progress bar on stderr, so that --json on stdout stays clean."""
    return click.progressbar(length=max(length, 0), label=label, file=sys.stderr)


def _instant(ctx: click.Context, param: click.Parameter, value: str | None) -> datetime | None:
    if value is None:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise click.BadParameter(f"{value!r} is not an ISO 8601 date or time") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


@cli.group()
def audit() -> None:
    """Seal the log into a hash chain, sign its head, verify and export it (docs/audit.md)."""


@audit.command("seal")
@click.option("--batch-size", default=5000, show_default=True, type=click.IntRange(1, 100_000))
@json_option
@click.pass_obj
def audit_seal(app: App, batch_size: int, as_json: bool) -> None:
    """Seal every committed event into the hash chain."""
    with _progress(sealer.backlog(app.engine).sealable, "sealing") as bar:
        result = sealer.seal(app.engine, batch_size=batch_size, progress=bar.update)
    head = result.head
    data = {
        "sealed": result.sealed,
        "chain_index": head.chain_index if head else None,
        "global_position": head.global_position if head else None,
        "link": head.link.hex() if head else None,
        "waiting_for_older_transactions": result.backlog.waiting,
    }
    said = f"sealed {result.sealed} events"
    if head is not None:
        said += f"; chain head index {head.chain_index}, position {head.global_position}, link {head.link.hex()}"
    if result.backlog.waiting:
        said += f"; {result.backlog.waiting} newer events wait for older transactions to finish"
    emit(data, as_json, said)


@audit.command("verify")
@click.option("--from", "from_position", type=click.IntRange(min=1), help="Check from this global position.")
@click.option("--to", "to_position", type=click.IntRange(min=1), help="Check up to this global position.")
@click.option("--digest", "digest_file", type=click.Path(dir_okay=False, path_type=Path),
              help="Prove the log still extends this signed digest.")
@click.option("--export", "export_file", type=click.Path(dir_okay=False, path_type=Path),
              help="Check an export file offline, without a database.")
@click.option("--public-key", help="Trusted Ed25519 public key: a PEM file, or base64 of its 32 raw bytes. "
              "Default: the configured signing key's.")
@json_option
@click.pass_obj
def audit_verify(app: App, from_position: int | None, to_position: int | None, digest_file: Path | None,
                 export_file: Path | None, public_key: str | None, as_json: bool) -> None:
    """Recompute the hash chain and report the first event that no longer matches."""
    if export_file and (from_position or to_position or digest_file):
        raise click.UsageError("--export checks a file on its own: drop --from, --to and --digest")
    if digest_file and (from_position or to_position):
        raise click.UsageError("--digest checks the whole chain: drop --from and --to")
    trusted = parse_public_key(public_key) if public_key else configured_public_key(app.settings)
    if export_file:
        with _progress(events_in_export(export_file), "checking export") as bar:
            report = verify_export(export_file, trusted, progress=bar.update)
    else:
        digest = read_digest_file(digest_file) if digest_file else None
        trusted_digest = check_trust(digest, trusted, f"digest {digest_file}") if digest else False
        stretch = audit_service.stretch_to_verify(app.engine, from_position, to_position)
        with _progress(stretch.length if stretch else 0, "verifying") as bar:
            report = audit_service.verify(app.engine, from_position=from_position, to_position=to_position,
                                          digest=digest, progress=bar.update)
        report = audit_service.with_trust(report, trusted_digest)
    error = report.error()
    if error is not None and not as_json:
        raise error
    emit(report.as_dict(), as_json, report.summary())
    if error is not None:
        sys.exit(error.exit_code)


@audit.command("digest")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the digest to this file (keep it outside the database).")
@click.option("--verify/--no-verify", "verify_first", default=True, show_default=True,
              help="Check the whole chain before signing its head.")
@json_option
@click.pass_obj
def audit_digest(app: App, out: Path | None, verify_first: bool, as_json: bool) -> None:
    """Sign the chain head with the configured Ed25519 key and print (or write) the digest."""
    key = signing_key(app.settings)
    stretch = audit_service.stretch_to_verify(app.engine) if verify_first else None
    with _progress(stretch.length if stretch else 0, "verifying" if verify_first else "signing") as bar:
        signed = audit_service.make_digest(app.engine, key, verify_first=verify_first, progress=bar.update)
    document = signed.document
    if out is None:
        click.echo(json.dumps(document, indent=2))
        return
    write_digest_file(out, document)
    emit(document, as_json, f"digest of chain index {document['chain_index']} (position "
         f"{document['global_position']}) signed by {document['key_id']}, written to {out}")


@audit.command("export")
@click.option("--from", "since", callback=_instant, help="Recorded at or after this time (ISO 8601, UTC if no offset).")
@click.option("--to", "until", callback=_instant, help="Recorded before this time (ISO 8601, UTC if no offset).")
@click.option("--out", required=True, type=click.Path(dir_okay=False, path_type=Path), help="The JSON Lines file.")
@json_option
@click.pass_obj
def audit_export(app: App, since: datetime | None, until: datetime | None, out: Path, as_json: bool) -> None:
    """Export sealed events with their links and a signed digest, for offline checking."""
    key = signing_key(app.settings)
    with _progress(stretch_for_times(app.engine, since, until).length, "exporting") as bar:
        result = export_log(app.engine, key, out, since=since, until=until, progress=bar.update)
    data = {"path": str(result.path), "events": result.events, "first_index": result.first_index,
            "last_index": result.last_index, "key_id": result.key_id}
    emit(data, as_json, f"exported {result.events} events (chain index {result.first_index}-{result.last_index}) "
         f"to {result.path}, signed by {result.key_id}; check it with `authledger audit verify --export {result.path}`")


@outbox.command("stuck")
@click.option("--older-than", default=60.0, show_default=True, type=click.FloatRange(0), help="Seconds overdue.")
@click.option("--limit", default=100, show_default=True, type=click.IntRange(1, 10_000))
@json_option
@click.pass_obj
def outbox_stuck(app: App, older_than: float, limit: int, as_json: bool) -> None:
    """Messages past their due time, with the likely reason."""
    stuck = stuck_messages(app.engine, now=app.clock.now(), older_than_seconds=older_than, limit=limit)
    lines = [f"{m['message_id']}  {m['state']:<8} overdue {m['overdue_seconds']:>8} s  {m['reason']}" for m in stuck]
    emit(stuck, as_json, "\n".join(lines) or "nothing stuck")


@cli.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to listen on.")
@click.option("--port", default=8000, show_default=True, type=click.IntRange(1, 65535))
@click.option("--workers", default=1, show_default=True, type=click.IntRange(0, 64),
              help="Delivery worker threads in this process (0: the API only).")
@click.pass_obj
def serve(app: App, host: str, port: int, workers: int) -> None:
    """Run the HTTP API and the delivery workers; SIGTERM or Ctrl-C stops both cleanly.

    With no DATABASE_URL this initialises the embedded database, and prints
    where mail is delivered and a development API key.
    """
    from infra.http.serve import serve as run_server  # uvicorn and starlette load only to serve

    run_server(app, host=host, port=port, workers=workers, say=click.echo)


@cli.group()
def clients() -> None:
    """API keys of the applications that call the HTTP API."""


@clients.command("create")
@click.argument("name")
@json_option
@click.pass_obj
def clients_create(app: App, name: str, as_json: bool) -> None:
    """Register a client and print its API key, once: only its SHA-256 is kept."""
    created = client_service.create_client(app.engine, name, metadata=cli_metadata("clients create"))
    emit({"name": created.name, "api_key": created.api_key}, as_json,
         f"client {created.name} created; its API key, shown this once (send it as 'Authorization: Bearer <key>'):"
         f"\n{created.api_key}")


@clients.command("list")
@json_option
@click.pass_obj
def clients_list(app: App, as_json: bool) -> None:
    """Every client, active or revoked."""
    rows = client_service.list_clients(app.engine)
    data = [{"name": r.name, "status": r.status, "created_at": r.created_at.isoformat(),
             "revoked_at": r.revoked_at.isoformat() if r.revoked_at else None} for r in rows]
    lines = [f"{r['name']:<24} {r['status']:<8} created {r['created_at']}"
             + (f", revoked {r['revoked_at']}" if r["revoked_at"] else "") for r in data]
    emit(data, as_json, "\n".join(lines) or "no clients yet; create one with `authledger clients create NAME`")


@clients.command("revoke")
@click.argument("name")
@json_option
@click.pass_obj
def clients_revoke(app: App, name: str, as_json: bool) -> None:
    """Revoke a client's key; its next request gets 401."""
    revoked = client_service.revoke_client(app.engine, name, metadata=cli_metadata("clients revoke"))
    emit({"name": name, "revoked": True, "already_revoked": not revoked}, as_json,
         f"client {name} revoked" if revoked else f"client {name} was already revoked")


@cli.group()
def privacy() -> None:
    """Personal data: erase a user's (crypto-shredding; docs/operations.md)."""


@privacy.command("forget")
@click.option("--user-id", required=True, help="The application's id for the user.")
@json_option
@click.pass_obj
def privacy_forget(app: App, user_id: str, as_json: bool) -> None:
    """Destroy the user's data keys: their addresses in the log read [erased] from now on."""
    erasure = forget_subject(app.engine, user_id, now=datetime.now(UTC), metadata=cli_metadata("privacy forget"))
    if not erasure.recorded:
        said = f"user {user_id} was already erased at {erasure.erased_at.isoformat()}; nothing changed"
    elif not erasure.key_ids:
        said = f"user {user_id} had no personal data key left; the erasure is recorded"
    else:
        said = (f"user {user_id} erased: data key {', '.join(erasure.key_ids)} destroyed; their personal data "
                "reads [erased] from now on")
    emit(erasure.as_dict(), as_json, said)



# -- Projections, history and explain (issue 6; docs/incident-review.md) ----------------------------


@cli.group()
def projections() -> None:
    """Read models: list, status, rebuild, verify, replay as of a moment, and the catch-up runner."""


def _targets(name: str | None, every: bool, *, default_all: bool = False) -> list[Projection]:
    if name and every:
        raise click.UsageError("give a projection name or --all, not both")
    if name:
        return [projection_named(name)]
    if every or default_all:
        return all_projections()
    raise click.UsageError("give a projection name (see `authledger projections list`) or --all")


def _rate_progress(length: int, label: str) -> Any:
    """A progress bar on stderr with events/s beside the ETA; returns (bar, update)."""
    bar = click.progressbar(length=max(length, 1), label=label, file=sys.stderr, show_eta=True,
                            item_show_func=lambda rate: rate)
    started, done = datetime.now(UTC), [0]

    def update(n: int) -> None:
        done[0] += n
        seconds = (datetime.now(UTC) - started).total_seconds()
        bar.update(n, f"{done[0] / seconds:,.0f} events/s" if seconds > 0 else None)

    return bar, update


@projections.command("list")
@json_option
@click.pass_obj
def projections_list(app: App, as_json: bool) -> None:
    """Every projection: name, kind (inline or catch-up), tables, what it holds."""
    data = [{"name": p.name, "kind": p.kind, "tables": [t.name for t in p.tables], "description": p.description}
            for p in all_projections()]
    emit(data, as_json, "\n".join(f"{p['name']:<16} {p['kind']:<9} {', '.join(p['tables']):<20} {p['description']}"
                                  for p in data))


@projections.command("status")
@click.option("--warn-after", default=60.0, show_default=True, type=click.FloatRange(0),
              help="Warn when one transaction has held the horizon back this many seconds.")
@json_option
@click.pass_obj
def projections_status(app: App, warn_after: float, as_json: bool) -> None:
    """Checkpoints, lag in events and seconds, and the oldest transaction holding the horizon back."""
    status = projection_status(app.admin_engine, warn_after_seconds=warn_after)
    emit(status.as_dict(), as_json, render_status(status))


@projections.command("rebuild")
@click.argument("name", required=False)
@click.option("--all", "every", is_flag=True, help="Rebuild every projection, one after the other.")
@click.option("--batch-size", default=5000, show_default=True, type=click.IntRange(1, 100_000))
@json_option
@click.pass_obj
def projections_rebuild(app: App, name: str | None, every: bool, batch_size: int, as_json: bool) -> None:
    """Rebuild from the log into shadow tables while traffic runs, then swap them in."""
    results = []
    for projection in _targets(name, every):
        bar, update = _rate_progress(log_length(app.engine), f"rebuilding {projection.name}")
        with bar:
            result = rebuild_projection(app.admin_engine, projection, batch_size=batch_size, progress=update)
        results.append(result)
        if not as_json:
            click.echo(f"{result.projection}: rebuilt from {result.events} events in {result.seconds:.1f} s "
                       f"({result.events_per_second:,.0f} events/s); writers waited {result.swap_seconds * 1000:.0f} "
                       "ms for the swap")
    if as_json:
        emit([{"projection": r.projection, "events": r.events, "seconds": round(r.seconds, 3),
               "events_per_second": round(r.events_per_second), "swap_seconds": round(r.swap_seconds, 4),
               "swap_attempts": r.swap_attempts} for r in results], True, "")


@projections.command("verify")
@click.argument("name", required=False)
@click.option("--limit", default=20, show_default=True, type=click.IntRange(1, 10_000),
              help="Differing rows to print per projection.")
@json_option
@click.pass_obj
def projections_verify(app: App, name: str | None, limit: int, as_json: bool) -> None:
    """Rebuild to the side and compare with the live tables; exit non-zero on any difference."""
    reports = []
    for projection in _targets(name, False, default_all=True):
        bar, update = _rate_progress(log_length(app.engine), f"verifying {projection.name}")
        with bar:
            report = verify_projection(app.admin_engine, projection, progress=update, limit=limit)
        reports.append(report)
        if not as_json:
            click.echo(report.summary())
    if as_json:
        emit([r.as_dict() for r in reports], True, "")
    differing = [r.projection for r in reports if not r.ok]
    if differing:
        error = ProjectionMismatch(f"{', '.join(differing)} differ from a replay of the log; "
                                   "`authledger projections rebuild NAME` rebuilds one from the log")
        click.echo(f"Error: {error.message}", err=True)
        sys.exit(error.exit_code)


@projections.command("replay")
@click.argument("name", required=False)
@click.option("--as-of", callback=_instant, help="The moment, ISO 8601 (UTC if no offset).")
@click.option("--to-position", type=click.IntRange(min=0), help="Up to this global position instead.")
@click.option("--into", "schema", help="The schema to build into (created; lower-case letters, digits, _).")
@click.option("--drop", "drop_schema", help="Drop a schema made by an earlier replay, and nothing else.")
@json_option
@click.pass_obj
def projections_replay(app: App, name: str | None, as_of: datetime | None, to_position: int | None,
                       schema: str | None, drop_schema: str | None, as_json: bool) -> None:
    """Build a projection as it stood at a moment into a side schema, for incident review."""
    if drop_schema:
        if name or schema or as_of or to_position is not None:
            raise click.UsageError("--drop takes only the schema name")
        drop_replay(app.admin_engine, drop_schema)
        emit({"dropped": drop_schema}, as_json, f"dropped schema {drop_schema}")
        return
    if not name or not schema or (as_of is None) == (to_position is None):
        raise click.UsageError("give NAME, --into SCHEMA and one of --as-of or --to-position")
    bound = log_as_of(as_of) if as_of is not None else log_to_position(to_position)
    bar, update = _rate_progress(0, f"replaying {name}")
    with bar:
        result = replay_into(app.admin_engine, projection_named(name), schema, bound, progress=update)
    data = {"projection": result.projection, "schema": result.schema, "tables": result.tables,
            "events": result.events, "bound": result.bound, "warnings": result.warnings}
    emit(data, as_json, "\n".join([f"{result.projection} {result.bound}: {result.events} events folded into "
                                   f"{', '.join(result.tables)}", *(f"warning: {w}" for w in result.warnings)]))


@projections.command("run")
@click.option("--once", is_flag=True, help="Catch up to the horizon, then exit.")
@click.option("--batch-size", default=1000, show_default=True, type=click.IntRange(1, 100_000))
@click.option("--poll-seconds", default=5.0, show_default=True, type=click.FloatRange(0.05))
@json_option
@click.pass_obj
def projections_run(app: App, once: bool, batch_size: int, poll_seconds: float, as_json: bool) -> None:
    """Run the catch-up projections: follow the log until stopped (SIGTERM or Ctrl-C)."""
    runner = CatchUpRunner(app.engine, batch_size=batch_size, poll_seconds=poll_seconds)
    if once:
        folded = runner.run_once()
        emit(folded, as_json, ", ".join(f"{name}: {n} events" for name, n in folded.items()))
        return
    configure_logging(app.settings.log_format)
    stop_on_sigterm()
    try:
        runner.run()
    except (KeyboardInterrupt, SystemExit):
        runner.stop()


@outbox.command("stats")
@click.option("--days", default=7, show_default=True, type=click.IntRange(1, 3660), help="Days back, today included.")
@json_option
@click.pass_obj
def outbox_stats(app: App, days: int, as_json: bool) -> None:
    """Delivery per day (UTC), flow and outcome: messages, attempts, time from queued to accepted."""
    until = datetime.now(UTC).date()
    report = delivery_report(app.engine, since=until - timedelta(days=days - 1), until=until)
    emit({"as_of": report_as_of(app.engine), "days": as_report_rows(report)}, as_json,
         render_report(report) if report else "no messages in that period (is `projections run` running?)")


@cli.command("history")
@click.option("--user-id", required=True, help="The application's id for the user.")
@click.option("--flow", type=click.Choice(["reset", "otp"]), help="One flow only.")
@click.option("--as-of", callback=_instant, help="As it stood at this moment, ISO 8601 (UTC if no offset).")
@json_option
@click.pass_obj
def history_command(app: App, user_id: str, flow: str | None, as_of: datetime | None, as_json: bool) -> None:
    """Everything that happened to a user's requests and emails, explained, then as a timeline."""
    review = review_service.history(app.engine, user_id, flow=flow, as_of=as_of, now=datetime.now(UTC))
    emit(review.as_dict(), as_json, review.render())


@cli.command("explain")
@click.option("--request-id", type=click.UUID, help="A reset request or OTP challenge.")
@click.option("--message-id", type=click.UUID, help="One email.")
@json_option
@click.pass_obj
def explain_command(app: App, request_id: Any, message_id: Any, as_json: bool) -> None:
    """Why a link worked or not, and what happened to each email: sentences, then a timeline."""
    if (request_id is None) == (message_id is None):
        raise click.UsageError("give exactly one of --request-id or --message-id")
    review = review_service.explain(app.engine, request_id=request_id, message_id=message_id, now=datetime.now(UTC))
    emit(review.as_dict(), as_json, review.render())


def main() -> None:
    try:
        cli(prog_name="authledger")
    except Exception as error:  # a bug, not a user error: still no traceback for the user
        if os.environ.get("AUTHLEDGER_DEBUG"):
            raise
        click.echo(f"Error: internal error ({type(error).__name__}); rerun with AUTHLEDGER_DEBUG=1 for details", err=True)
        sys.exit(70)
