"""Delivery into a Maildir on local disk: the embedded default provider."""

from __future__ import annotations

import asyncio
import email.policy
import logging
import os
from pathlib import Path
from uuid import uuid4

from domain.errors import ConfigError
from infra.delivery.providers import OutboundEmail, ProviderReceipt, RetryableSendError, envelope_address
from infra.delivery.providers.mime import render_mime
from infra.delivery.providers.threads import SendThreads
from infra.logs import log_event

log = logging.getLogger("authledger.delivery")

# Not a Maildir++ folder (those start with a dot), so mail readers and
# ``mailbox.Maildir.list_folders`` leave it alone.
_DELIVERED_DIR = "authledger-delivered"
# Files on disk end lines with "\n", as ``mailbox`` writes them.
_FILE_POLICY = email.policy.default


def make_maildir(path: Path) -> None:
    """Make each of ``path``'s folders that is missing (mode 0700), ``path`` and its parents included.

    ``mailbox.Maildir(create=True)`` makes cur/new/tmp only when the folder
    itself is missing: an existing empty folder failed every send. The
    parents too: the data directory need not exist yet when DATABASE_URL is
    set. ``ConfigError`` when they cannot be made.
    """
    try:
        for folder in ("cur", "new", "tmp", _DELIVERED_DIR):
            (path / folder).mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"the Maildir {path} cannot be made: {e.strerror or type(e).__name__} "
                          "(AUTHLEDGER_MAILDIR, or AUTHLEDGER_DATA_DIR that holds it by default)") from e


class MaildirMailer:
    """Writes each email as one file in ``path/new``, at most once per message id.

    Idempotency rests on the Maildir key being the message id itself. The
    message is written to ``tmp/`` and hard-linked to ``new/<message id>``,
    which is the delivery step the Maildir format prescribes and is atomic:
    ``link`` fails with EEXIST when the name exists, exactly like an
    ``O_EXCL`` create. Several worker processes racing on the same message
    therefore deliver it once, and the losers see EEXIST and return the same
    receipt. No separate lock or index is needed, and a crash can never leave
    a claim behind that says "delivered" when nothing was.

    A mail reader moves read mail from ``new/`` to ``cur/`` (renaming it
    ``<key>:2,S``) or deletes it, after which the name in ``new/`` is free
    again. So once the link succeeds we also drop an empty marker file named
    after the message id in ``authledger-delivered/``: a later replay finds
    it with one ``stat`` and writes nothing. The marker is written after the
    delivery, never before, so a crash between the two can at worst deliver
    twice (if the mail was also read in that window), never lose the email.

    ``sender`` is the envelope sender, written as ``Return-Path``; the From
    header comes from the email. ``send_async`` runs ``send`` on up to
    ``window`` threads of the mailer's own: each send waits on an fsync.
    """

    name = "maildir"
    idempotent = True  # a delivered marker per message id

    # A local write does not hang on a remote peer; this is what leases are
    # sized from, with room for a slow disk.
    timeout_seconds = 5.0

    def __init__(self, path: Path, sender: str, *, window: int = 1) -> None:
        self.path = Path(path)
        self.sender = envelope_address(sender)
        make_maildir(self.path)
        self._delivered = self.path / _DELIVERED_DIR
        self._threads = SendThreads(self.send, window, self.name)

    async def send_async(self, email: OutboundEmail) -> ProviderReceipt:
        return await self._threads(email)

    def close(self) -> None:
        self._threads.close()

    async def aclose(self) -> None:
        await asyncio.to_thread(self.close)

    def send(self, email: OutboundEmail) -> ProviderReceipt:
        key = str(email.message_id)  # a UUID: no "/" or ":", safe as a file name
        receipt = ProviderReceipt(provider=self.name, provider_message_id=key)
        marker = self._delivered / key
        if marker.exists():
            return receipt
        data = render_mime(email, return_path=self.sender).as_bytes(policy=_FILE_POLICY)
        try:
            self._deliver(key, data)
            marker.touch(mode=0o600)
        except OSError as e:
            # The disk, not this email: the provider is down for every email until the folder is fixed.
            error = f"maildir write failed: {e.strerror or type(e).__name__}"
            log_event(log, error, logging.WARNING, path=str(self.path), message_id=key)
            raise RetryableSendError(error, provider_down=True) from e
        return receipt

    def _deliver(self, key: str, data: bytes) -> None:
        tmp = self.path / "tmp" / f"{key}.{os.getpid()}.{uuid4().hex}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                # The Maildir protocol: the file is on disk before its name
                # appears in new/, so a reader never sees a partial message.
                os.fsync(f.fileno())
            try:
                os.link(tmp, self.path / "new" / key)
            except FileExistsError:
                pass  # already delivered, by an earlier attempt or a concurrent worker
        finally:
            tmp.unlink(missing_ok=True)
