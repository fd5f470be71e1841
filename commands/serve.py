"""`authledger serve`: the HTTP API and the delivery workers, in one process or several."""

from __future__ import annotations

import attrs
import click

from infra.bootstrap import App


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to listen on.")
@click.option("--port", default=8000, show_default=True, type=click.IntRange(1, 65535))
@click.option("--inflight", type=click.IntRange(0, 1024), default=None,
              help="Provider calls in flight at once (0: the API only)  [default: AUTHLEDGER_DELIVERY_INFLIGHT]")
@click.option("--processes", type=click.IntRange(1, 64), default=None,
              help="API processes sharing the port; the first also runs delivery, the catch-up runner and the "
                   "closed-counts writer.  [default: AUTHLEDGER_API_PROCESSES, or one for each core, at most 4]")
@click.pass_obj
def serve(app: App, host: str, port: int, inflight: int | None, processes: int | None) -> None:
    """Run the HTTP API and the delivery workers; SIGTERM or Ctrl-C stops both cleanly.

    N API processes share the port (--processes N; by default one for each
    core, at most four), each with its own database pool; the database
    (embedded or not) is one, started once.

    With no DATABASE_URL this initialises the embedded database, and prints
    where mail is delivered and a development API key.
    """
    from infra.http.serve import serve as run_server  # uvicorn and starlette load only to serve

    if inflight is None:
        inflight = app.settings.delivery_inflight
    elif inflight:  # before the mailer is built: a provider sizes its connection pool to the window
        app.settings = attrs.evolve(app.settings, delivery_inflight=inflight)
    app.reserve_connections(2 if inflight else 0)  # the window's steps, and a stale message's second read
    run_server(app, host=host, port=port, inflight=inflight, processes=processes or app.settings.api_process_count,
               say=click.echo)
