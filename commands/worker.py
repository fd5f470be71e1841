"""`authledger worker`: delivering email."""

from __future__ import annotations

import attrs
import click

from commands.output import emit, json_option
from infra.bootstrap import App, stop_on_sigterm

from infra.delivery.send import GIVEN_UP
from infra.delivery.worker import Worker
from infra.errors import EmailsGivenUp
from infra.logs import configure_logging


@click.command()
@click.option("--inflight", type=click.IntRange(1, 1024), default=None,
              help="Provider calls in flight at once  [default: AUTHLEDGER_DELIVERY_INFLIGHT]")
@click.option("--batch", type=click.IntRange(1, 1024), default=None,
              help="Most messages claimed in one statement  [default: the window]")
@click.option("--once", is_flag=True, help="Deliver everything due now, then exit.")
@json_option
@click.pass_obj
def worker(app: App, inflight: int | None, batch: int | None, once: bool, as_json: bool) -> None:
    """Claim due emails and deliver them.

    With --once, the exit status is 13 when it gave up on any email (abandoned
    at the hard cap or refused for good by the provider), after the tally.
    """
    configure_logging(app.settings.log_format)
    app.reserve_connections(2)  # the window's steps, one at a time, and a stale message's second read
    app.check_keys()
    if inflight is not None:  # before the mailer is built: a provider sizes its connection pool to the window
        app.settings = attrs.evolve(app.settings, delivery_inflight=inflight)
    delivery = Worker(app.services, app.mailer, sender=app.settings.sender, batch=batch,
                      inflight=app.settings.delivery_inflight, poll_seconds=app.settings.poll_seconds,
                      outcomes=app.outcomes_engine)
    if once:
        tally = delivery.drain()
        emit(tally, as_json, ", ".join(f"{state}: {n}" for state, n in sorted(tally.items())) or "nothing due")
        given_up = {state: n for state, n in sorted(tally.items()) if state in GIVEN_UP and n}
        if given_up:  # mail that will not arrive on its own: a script running this must hear of it
            raise EmailsGivenUp(f"gave up on {sum(given_up.values())} email(s) "
                                f"({', '.join(f'{state}: {n}' for state, n in given_up.items())}); "
                                "`authledger outbox status` shows them, `authledger outbox retry` sends them again")
        return
    stop_on_sigterm()
    delivery.run()
