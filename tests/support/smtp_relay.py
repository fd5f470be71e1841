"""A real SMTP server in-process (aiosmtpd) that keeps what it accepts.

It can refuse (``refusals``) or stall (``stall``) a command on request, or
hold its answer until the test lets it go (``held``), so tests can drive
temporary and permanent failures through a real SMTP dialogue. It counts the
DATA commands it received (``data_commands``) and those it was answering at
one moment (``in_data``, ``peak_in_data``). It counts the connections it accepted (``connections``) and can
end every session at its Nth MAIL FROM with a 421 and a hang-up
(``hang_up_at_mail``), as a relay does that limits messages per connection.
It can keep a message and then drop the connection without answering its
DATA (``drop_after_data``), so that the client cannot know it was accepted.
Stopping it hangs up on the clients still connected (pooled sessions).
"""

from __future__ import annotations

import asyncio
from email import message_from_bytes
from email.message import EmailMessage
from email.policy import default as default_policy
from collections.abc import Callable
from typing import Any

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP, Envelope


class Relay:
    """An aiosmtpd handler that keeps what it accepts and refuses or stalls on request."""

    def __init__(self) -> None:
        self.port = 0  # set once it listens
        self.envelopes: list[Envelope] = []
        self.refusals: dict[str, list[str]] = {"RCPT": [], "DATA": []}
        self.stall: dict[str, float] = {"MAIL": 0.0, "RCPT": 0.0, "DATA": 0.0}
        self.held: set[str] = set()  # commands answered only once the test discards them
        self.data_commands = 0
        self.in_data = 0
        self.peak_in_data = 0
        self.hang_up_at_mail: int | None = None
        self.connections = 0
        self.mails_refused_421 = 0
        # Given the number of a DATA command (from 1): whether to keep its
        # message and hang up instead of answering.
        self.drop_after_data: Callable[[int], bool] | None = None

    async def handle_MAIL(self, server: Any, session: Any, envelope: Envelope, address: str, options: list[str]) -> str:
        await asyncio.sleep(self.stall["MAIL"])
        session.mails = getattr(session, "mails", 0) + 1
        if session.mails == self.hang_up_at_mail:
            self.mails_refused_421 += 1
            # Runs once the 421 below is written: close flushes it first.
            asyncio.get_running_loop().call_soon(server.transport.close)
            return "421 4.7.0 too many messages on this connection, closing"
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
        self.data_commands += 1
        self.in_data += 1
        self.peak_in_data = max(self.peak_in_data, self.in_data)
        try:
            await asyncio.sleep(self.stall["DATA"])
            while "DATA" in self.held:
                await asyncio.sleep(0.01)
            if self.refusals["DATA"]:
                return self.refusals["DATA"].pop(0)
            self.envelopes.append(envelope)
            if self.drop_after_data is not None and self.drop_after_data(self.data_commands):
                server.transport.abort()  # kept, never acknowledged: the client's outcome is unknown
            return "250 Message accepted for delivery"
        finally:
            self.in_data -= 1

    def messages(self) -> list[EmailMessage]:
        return [message_from_bytes(e.original_content or b"", policy=default_policy) for e in self.envelopes]


class _CountedSMTP(SMTP):
    """aiosmtpd's SMTP server protocol, one per connection, known to its controller."""

    controller: LocalController

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        first = self.transport is None  # not the same connection again after STARTTLS
        super().connection_made(transport)
        if first:
            self.event_handler.connections += 1
            self.controller.open_sessions.add(self)

    def connection_lost(self, error: Exception | None) -> None:
        self.controller.open_sessions.discard(self)
        super().connection_lost(error)


class LocalController(Controller):
    """aiosmtpd's Controller on a free port, hanging up on its clients when it stops."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.open_sessions: set[_CountedSMTP] = set()

    def factory(self) -> SMTP:
        server = _CountedSMTP(self.handler, **self.SMTP_kwargs)
        server.controller = self
        return server

    def _trigger_server(self) -> None:
        # aiosmtpd cannot find port 0's real number itself.
        assert self.server is not None
        self.port = self.server.sockets[0].getsockname()[1]
        super()._trigger_server()

    def hang_up_all(self) -> None:
        """Drops every open connection without a word, as a relay that restarts does."""
        asyncio.run_coroutine_threadsafe(self._hang_up(), self.loop).result(timeout=5)

    def stop(self, no_assert: bool = False) -> None:
        # A client's pooled session would otherwise leave its transport open
        # when the loop stops: a ResourceWarning, and warnings are errors.
        self.hang_up_all()
        super().stop(no_assert)

    async def _hang_up(self) -> None:
        for server in list(self.open_sessions):
            if server.transport is not None:
                server.transport.abort()
        for _ in range(100):
            if not self.open_sessions:
                return
            await asyncio.sleep(0.01)


def start_relay(relay: Relay, **smtp_options: Any) -> LocalController:
    controller = LocalController(relay, hostname="127.0.0.1", port=0, server_hostname="relay.test", **smtp_options)
    controller.start()
    relay.port = controller.port
    # start() proved the server up by connecting and reading its greeting,
    # so that connection is counted already: only the clients' count.
    relay.connections = 0
    return controller
