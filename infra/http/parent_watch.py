"""An API process ends with the `serve` that started it, however that one ends.

A supervisor stopped by SIGTERM stops its API processes itself. One killed
by SIGKILL or the OOM killer runs no code on the way out: its API processes
would live on, holding the port, answering ``/healthz`` with the database
gone, and the next ``serve`` would find the port taken.

So each API process watches its parent's end of the pipe that
``multiprocessing`` keeps between them (``parent_process().sentinel``): the
kernel closes it when the parent ends, whatever the way. The process then
stops itself as SIGTERM would have stopped it (requests in hand finished,
claimed emails given back) and, should that not end it within the grace
period, exits at once. A pipe rather than Linux's ``PR_SET_PDEATHSIG``: it
works on every POSIX system, fires even when the parent died before the
child began to watch (the pipe is already closed), and follows the parent
process rather than the parent thread that started the child.
"""

from __future__ import annotations

import logging
import multiprocessing
import multiprocessing.connection
import os
import signal
import threading

from infra.logs import log_event

log = logging.getLogger("authledger.serve")

ORPHANED_EXIT = 3  # as an API process that fails to start: the supervisor, were there one, would stop the rest


def follow_parent(*, grace_seconds: float) -> None:
    """In a process started by ``multiprocessing``: stop when its parent ends (no-op in any other process)."""
    parent = multiprocessing.parent_process()
    if parent is None:
        return
    watcher = threading.Thread(target=_stop_when_gone, args=(parent.sentinel, parent.pid, grace_seconds),
                               name="authledger-parent-watch", daemon=True)
    watcher.start()


def _stop_when_gone(sentinel: int, parent_pid: int | None, grace_seconds: float) -> None:
    multiprocessing.connection.wait([sentinel])  # readable (end of file) once no process holds the other end
    log_event(log, "serve ended: this API process stops", logging.WARNING, parent_pid=parent_pid, pid=os.getpid())
    os.kill(os.getpid(), signal.SIGTERM)  # the same graceful stop as when the supervisor asks for it
    threading.Event().wait(grace_seconds)  # a daemon thread: a process that stopped in time never gets past this
    log_event(log, "api process killed", logging.WARNING, pid=os.getpid(), after_seconds=grace_seconds)
    os._exit(ORPHANED_EXIT)
