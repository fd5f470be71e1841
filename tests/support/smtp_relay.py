"""A real SMTP server in-process (aiosmtpd) that keeps what it accepts.

It can refuse (``refusals``) or stall (``stall``) a command on request, so
tests can drive temporary and permanent failures through a real SMTP dialogue.
"""

from __future__ import annotations

import asyncio
from email import message_from_bytes
from email.message import EmailMessage
from email.policy import default as default_policy
from typing import Any

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import Envelope


class Relay:
    """An aiosmtpd handler that keeps what it accepts and refuses or stalls on request."""

    def __init__(self) -> None:
        self.port = 0  # set once it listens
        self.envelopes: list[Envelope] = []
        self.refusals: dict[str, list[str]] = {"RCPT": [], "DATA": []}
        self.stall: dict[str, float] = {"MAIL": 0.0, "RCPT": 0.0, "DATA": 0.0}

    async def handle_MAIL(self, server: Any, session: Any, envelope: Envelope, address: str, options: list[str]) -> str:
        await asyncio.sleep(self.stall["MAIL"])
        envelope.mail_from = address
        envelope.mail_options.extend(options)
        return "250 OK"

    async def handle_RCPT(self, server: Any, session: Any, envelope: Envelope, address: str, options: list[str]) -> str:
        await asyncio.sleep(self.stall["RCPT"])
        if self.refusals["RCPT"]:
            return self.refusals["RCPT"].pop(0)
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: Any, session: Any, envelope: Envelope) -> str:
        await asyncio.sleep(self.stall["DATA"])
        if self.refusals["DATA"]:
            return self.refusals["DATA"].pop(0)
        self.envelopes.append(envelope)
        return "250 Message accepted for delivery"

    def messages(self) -> list[EmailMessage]:
        return [message_from_bytes(e.original_content or b"", policy=default_policy) for e in self.envelopes]


class LocalController(Controller):
    """aiosmtpd's Controller on a free port: it cannot find port 0's real number itself."""

    def _trigger_server(self) -> None:
        assert self.server is not None
        self.port = self.server.sockets[0].getsockname()[1]
        super()._trigger_server()


def start_relay(relay: Relay, **smtp_options: Any) -> LocalController:
    controller = LocalController(relay, hostname="127.0.0.1", port=0, server_hostname="relay.test", **smtp_options)
    controller.start()
    relay.port = controller.port
    return controller
