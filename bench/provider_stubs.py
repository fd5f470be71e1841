"""Loopback provider stubs for bench/providers.py, each in its own process.

- ``http``: a Resend-style JSON API on asyncio (uvloop), HTTP/1.1 with
  keep-alive, answering every POST after a fixed delay with ``{"id": ...}``.
  It counts requests per ``Idempotency-Key`` and the peak in flight, and can
  go down (its listening socket closed and open connections dropped, so
  clients get "connection refused") and come back on the same port.
- ``smtp``: aiosmtpd taking a fixed time per message (in ``DATA``); it counts
  connections and messages.

The parent talks to a stub over a ``multiprocessing`` pipe: ``("stats",)``,
``("down",)`` and ``("up",)``; every command is answered with the stats.
A stub costs little CPU: one event loop, no thread per connection.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections import Counter
from typing import Any

import uvloop

_OK_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"


class HttpStub:
    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.keys: Counter[str] = Counter()
        self.requests = self.in_flight = self.peak_in_flight = self.connections = 0
        self.server: asyncio.AbstractServer | None = None
        self.writers: set[asyncio.StreamWriter] = set()
        self.port = 0

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", self.port, reuse_address=True)
        self.port = self.server.sockets[0].getsockname()[1]

    async def down(self) -> None:
        """Close the listening socket and drop every connection: new connects are refused."""
        assert self.server is not None
        self.server.close()
        for writer in list(self.writers):
            writer.transport.abort()
        await self.server.wait_closed()
        self.server = None

    def stats(self) -> dict[str, Any]:
        return {"port": self.port, "requests": self.requests, "keys": len(self.keys),
                "repeated_keys": sum(1 for n in self.keys.values() if n > 1),
                "peak_in_flight": self.peak_in_flight, "connections": self.connections, "cpu": _cpu()}

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.writers.add(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                headers = dict(line.split(b":", 1) for line in head.split(b"\r\n")[1:] if b":" in line)
                headers = {name.strip().lower(): value.strip() for name, value in headers.items()}
                await reader.readexactly(int(headers.get(b"content-length", b"0")))
                key = headers.get(b"idempotency-key", b"").decode()
                self.requests += 1
                self.in_flight += 1
                self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
                try:
                    await asyncio.sleep(self.delay)
                finally:
                    self.in_flight -= 1
                self.keys[key] += 1
                body = json.dumps({"id": f"stub-{key}"}).encode()
                writer.write(_OK_HEAD % len(body) + body)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError, RuntimeError):
            # RuntimeError: uvloop refusing a write to a connection `down` aborted.
            pass
        finally:
            self.writers.discard(writer)
            writer.close()


class SmtpCounter:
    """aiosmtpd handler: waits ``delay`` per message, counts messages."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.messages = self.connections = 0

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        await asyncio.sleep(self.delay)
        self.messages += 1
        return "250 OK"


async def _http_main(delay: float, control: Any) -> None:
    stub = HttpStub(delay)
    await stub.start()
    commands = {"down": stub.down, "up": stub.start}
    await _obey(control, commands, stub.stats)


async def _smtp_main(delay: float, control: Any) -> None:
    from aiosmtpd.smtp import SMTP

    counter = SmtpCounter(delay)

    class CountingSMTP(SMTP):
        def connection_made(self, transport: Any) -> None:
            counter.connections += 1
            super().connection_made(transport)

    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: CountingSMTP(counter, hostname="stub.test"), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    stats = lambda: {"port": port, "messages": counter.messages, "connections": counter.connections,  # noqa: E731
                     "cpu": _cpu()}
    await _obey(control, {}, stats)


async def _obey(control: Any, commands: dict[str, Any], stats: Any) -> None:
    """Answer the parent's commands until it says ``stop`` (or goes away)."""
    loop = asyncio.get_running_loop()
    ready = asyncio.Event()
    loop.add_reader(control.fileno(), ready.set)
    control.send(stats())
    while True:
        await ready.wait()
        ready.clear()
        while control.poll():
            try:
                (command,) = control.recv()
            except EOFError:
                return
            if command == "stop":
                control.send(stats())
                return
            if command in commands:
                await commands[command]()
            control.send(stats())


def _cpu() -> float:
    times = os.times()
    return times.user + times.system


def run_stub(kind: str, delay: float, control: Any) -> None:
    """The stub process's body (a ``multiprocessing`` target)."""
    main = _http_main if kind == "http" else _smtp_main
    uvloop.run(main(delay, control))


class Stub:
    """A stub in its own process, driven from the parent."""

    def __init__(self, kind: str, delay: float) -> None:
        import multiprocessing

        context = multiprocessing.get_context("spawn")
        self._control, child = context.Pipe()
        self.process = context.Process(target=run_stub, args=(kind, delay, child), daemon=True)
        self.process.start()
        self.started = time.monotonic()
        self.port = self._control.recv()["port"] if self._control.poll(60) else None
        if self.port is None:
            raise RuntimeError(f"{kind} stub did not start")

    def command(self, name: str) -> dict[str, Any]:
        self._control.send((name,))
        return self._control.recv()

    def stop(self) -> dict[str, Any]:
        """Final stats, with ``cpu_share``: the stub's CPU over its lifetime's wall time."""
        stats = self.command("stop")
        stats["cpu_share"] = stats["cpu"] / (time.monotonic() - self.started)
        self.process.join(timeout=10)
        return stats
