"""`authledger audit`: seal the log into a hash chain, sign, verify and export it."""

from __future__ import annotations

import json
import shlex
import sys
from datetime import datetime
from pathlib import Path

import click

from commands.output import emit, json_option, parse_instant, progress_bar
from infra.audit import seal as sealer
from infra.audit import verify as audit_service
from infra.audit.digest import (
    check_trust,
    configured_public_key,
    parse_public_key,
    public_key_text,
    read_digest_file,
    signing_key,
    write_digest_file,
)
from infra.audit.export import ExportCheck, events_in_export, stretch_for_times, verify_export
from infra.audit.export import export as export_log
from infra.bootstrap import App
from infra.errors import KeyNotTrusted


@click.group()
def audit() -> None:
    """Seal the log into a hash chain, sign its head, verify and export it (docs/audit.md)."""


@audit.command("seal")
@click.option("--batch-size", default=5000, show_default=True, type=click.IntRange(1, 100_000))
@json_option
@click.pass_obj
def audit_seal(app: App, batch_size: int, as_json: bool) -> None:
    """Seal every committed event into the hash chain."""
    with progress_bar(sealer.backlog(app.engine).sealable, "sealing") as bar:
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
@click.option("--public-key", help="Trusted Ed25519 public key: a PEM file, or base64 of its 32 raw bytes "
              "(`authledger audit public-key` prints it). Default: the configured signing key's.")
@click.option("--trust-embedded-key", is_flag=True,
              help="With no trusted key, check the signature against the key written in the file itself.")
@json_option
@click.pass_obj
def audit_verify(app: App, from_position: int | None, to_position: int | None, digest_file: Path | None,
                 export_file: Path | None, public_key: str | None, trust_embedded_key: bool, as_json: bool) -> None:
    """Recompute the hash chain and report the first event that no longer matches."""
    if export_file and (from_position or to_position or digest_file):
        raise click.UsageError("--export checks a file on its own: drop --from, --to and --digest")
    if digest_file and (from_position or to_position):
        raise click.UsageError("--digest checks the whole chain: drop --from and --to")
    if public_key and trust_embedded_key:
        raise click.UsageError("give --public-key or --trust-embedded-key, not both")
    trusted = parse_public_key(public_key) if public_key else configured_public_key(app.settings)
    signed_file = export_file or digest_file
    if signed_file and trusted is None and not trust_embedded_key:
        raise KeyNotTrusted(
            f"{signed_file} carries its own public key, which cannot vouch for itself: pass --public-key "
            "(a PEM file or the base64 of the raw 32-byte key, see docs/audit.md \"Getting the public key\"), "
            "or --trust-embedded-key to accept the key inside the file"
        )
    report: ExportCheck | audit_service.VerifyReport
    if export_file:
        with progress_bar(events_in_export(export_file), "checking export") as bar:
            report = verify_export(export_file, trusted, progress=bar.update)
    else:
        digest = read_digest_file(digest_file) if digest_file else None
        trusted_digest = check_trust(digest, trusted, f"digest {digest_file}") if digest else False
        # On the read replica if one is set: a whole-chain check is long reading work (the report says how far
        # behind the replica was). Signing (`audit digest`) stays on the primary, whose head it vouches for.
        stretch = audit_service.stretch_to_verify(app.read_engine, from_position, to_position)
        with progress_bar(stretch.length if stretch else 0, "verifying") as bar:
            report = audit_service.verify(app.read_engine, from_position=from_position, to_position=to_position,
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
    with progress_bar(stretch.length if stretch else 0, "verifying" if verify_first else "signing") as bar:
        signed = audit_service.make_digest(app.engine, key, verify_first=verify_first, progress=bar.update)
    document = signed.document
    if out is None:
        click.echo(json.dumps(document, indent=2))
        return
    write_digest_file(out, document)
    emit(document, as_json, f"digest of chain index {document['chain_index']} (position "
         f"{document['global_position']}) signed by {document['key_id']}, written to {out}")


@audit.command("export")
@click.option("--from", "since", callback=parse_instant,
              help="Recorded at or after this time (ISO 8601, UTC if no offset).")
@click.option("--to", "until", callback=parse_instant, help="Recorded before this time (ISO 8601, UTC if no offset).")
@click.option("--out", required=True, type=click.Path(dir_okay=False, path_type=Path), help="The JSON Lines file.")
@json_option
@click.pass_obj
def audit_export(app: App, since: datetime | None, until: datetime | None, out: Path, as_json: bool) -> None:
    """Export sealed events with their links and a signed digest, for offline checking."""
    key = signing_key(app.settings)
    with progress_bar(stretch_for_times(app.engine, since, until).length, "exporting") as bar:
        result = export_log(app.engine, key, out, since=since, until=until, progress=bar.update)
    data = {"path": str(result.path), "events": result.events, "first_index": result.first_index,
            "last_index": result.last_index, "key_id": result.key_id}
    check = (f"authledger audit verify --export {shlex.quote(str(result.path))} "
             f"--public-key {public_key_text(key.public_key())}")
    emit(data, as_json, f"exported {result.events} events (chain index {result.first_index}-{result.last_index}) "
         f"to {result.path}, signed by {result.key_id}; check it with `{check}`")


@audit.command("public-key")
@click.option("--pem", is_flag=True, help="PEM (SubjectPublicKeyInfo) instead of the base64 of the raw 32 bytes.")
@click.pass_obj
def audit_public_key(app: App, pem: bool) -> None:
    """Print the configured signing key's public key, to give to auditors (never the private key)."""
    click.echo(public_key_text(signing_key(app.settings).public_key(), pem=pem).rstrip("\n"))
