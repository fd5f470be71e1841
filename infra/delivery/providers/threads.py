"""``send_async`` for providers whose ``send`` blocks (smtplib, local disk)."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from infra.delivery.providers import OutboundEmail, ProviderReceipt


class SendThreads:
    """Runs a blocking ``send`` off the event loop, up to ``window`` calls at once.

    Not ``asyncio.to_thread``: that shares the loop's default executor, which
    holds min(32, cores + 4) threads (six on a two-core machine), so a window
    of 64 SMTP sends would wait in its queue, their provider timeout running.
    Each provider gets threads of its own, as many as the window.
    """

    def __init__(self, send: Callable[[OutboundEmail], ProviderReceipt], window: int, name: str) -> None:
        self._send = send
        self._executor = ThreadPoolExecutor(max_workers=window, thread_name_prefix=f"{name}-send")

    async def __call__(self, email: OutboundEmail) -> ProviderReceipt:
        loop = asyncio.get_running_loop()
        # Carries the caller's context (log fields) into the thread, as to_thread does.
        context = contextvars.copy_context()
        return await loop.run_in_executor(self._executor, context.run, self._send, email)

    def close(self) -> None:
        """Waits for sends in progress; threads are started on demand, so this is cheap when idle."""
        self._executor.shutdown(wait=True)
