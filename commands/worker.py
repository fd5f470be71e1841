"""`authledger worker`: delivering email."""

from __future__ import annotations

import click

from commands.output import emit, json_option
from infra.bootstrap import App, stop_on_sigterm

from infra.delivery.worker import Worker
from infra.logs import configure_logging


@click.command()
@click.option("--concurrency", default=1, show_default=True, type=click.IntRange(1, 64))
@click.option("--batch", default=10, show_default=True, type=click.IntRange(1, 1000))
@click.option("--once", is_flag=True, help="Deliver everything due now, then exit.")
@json_option
@click.pass_obj
def worker(app: App, concurrency: int, batch: int, once: bool, as_json: bool) -> None:
    """Claim due emails and deliver them."""
    configure_logging(app.settings.log_format)
    app.reserve_connections(concurrency)
    app.check_keys()
    delivery = Worker(app.services, app.mailer, sender=app.settings.sender, batch=batch,
                      concurrency=concurrency, poll_seconds=app.settings.poll_seconds)
    if once:
        tally = delivery.drain()
        emit(tally, as_json, ", ".join(f"{state}: {n}" for state, n in sorted(tally.items())) or "nothing due")
        return
    stop_on_sigterm()
    delivery.run()
