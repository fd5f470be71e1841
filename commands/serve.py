"""`authledger serve`: the HTTP API and the delivery workers in one process."""

from __future__ import annotations

import click

from infra.bootstrap import App


@click.command()
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

    app.reserve_connections(workers)
    run_server(app, host=host, port=port, workers=workers, say=click.echo)
