"""An erasure racing a reset create and an OTP create of the same user, on real threads and real PostgreSQL.

Each round releases three threads at once (a reset create, an OTP create
and ``privacy forget`` of one user), on a brand-new user in the first half
of the rounds and, in the second half, on a user erased before (the case
that came back with a new key and leaked). The log then says which create
came before the erasure and which after (``tests.support.erasure_races``):
whatever came before is unreadable, its link or code dead and its email
skipped; whatever came after is the user coming back, readable under a new
key. Beside the rounds: a create held open with its new key not yet
committed is waited for, not missed; and a new user's two creates at once
both reach the address index, which both of them fold.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy import Engine, text

from domain.otp import RequestOtp
from domain.otp_events import otp_stream
from domain.reset import RequestReset
from domain.reset_events import reset_stream
from infra.clock import ManualClock
from infra.delivery.providers.maildir import MaildirMailer
from infra.delivery.worker import Worker
from infra.eventlog.subject_keys import PostgresKeyring
from infra.services.locks import lock_stream
from infra.services.otp import request_otp
from infra.services.privacy import Erasure, forget
from infra.services.reset import request_reset
from infra.services.unit_of_work import ServiceContext
from tests.support.dumps import dump
from tests.support.erasure_races import (
    REASON, Calls, NonceRecorder, addresses, erase_before, judge, maildir_recipients, play, race,
)
from tests.support.replay import assert_projections_match_log
from tests.support.waiting import lock_waiters, wait_until

ROUNDS = 200
SENDER = "authledger <no-reply@app.test>"
def service_calls(ctx: ServiceContext) -> Calls:
    def calls(user_id: str, reset_address: str, otp_address: str) -> list[Callable[[], object]]:
        return [lambda: request_reset(ctx, RequestReset(user_id, reset_address)),
                lambda: request_otp(ctx, RequestOtp(user_id, otp_address, purpose="login")),
                lambda: forget(ctx, user_id, reason=REASON)]
    return calls


@pytest.mark.slow
def test_an_erasure_racing_two_creates_leaves_nothing_readable_from_before_it(
    racing_ctx: ServiceContext, clock: ManualClock, nonces: NonceRecorder, engine: Engine, database_url: str,
    tmp_path: Path,
) -> None:
    fresh = [f"fresh-{n}" for n in range(ROUNDS // 2)]
    back = [f"back-{n}" for n in range(ROUNDS - len(fresh))]
    erased_earlier = erase_before(racing_ctx, clock, back)

    calls = service_calls(racing_ctx)
    rounds = [play(nonces, n, user_id, 0, calls) for n, user_id in enumerate(fresh)]
    rounds += [play(nonces, len(fresh) + n, user_id, 1, calls) for n, user_id in enumerate(back)]

    mail = tmp_path / "mail"
    Worker(racing_ctx, MaildirMailer(mail, "bounces@app.test"), sender=SENDER).drain()
    verdict = judge(racing_ctx, rounds, delivered_to=maildir_recipients(mail), earlier_addresses=erased_earlier)
    assert verdict.wrong == [], verdict.summary()
    # The race was run, not dodged: erasures were recorded with creates before them, fresh users and returning,
    # and creates came after erasures too.
    assert verdict.recorded and verdict.erased_creates and verdict.creates_after
    assert {r.erasure for r in rounds[:len(fresh)]} >= {True}
    assert {r.erasure for r in rounds[len(fresh):]} >= {True}
    whole = dump(database_url)
    assert not [a for r in rounds for c in r.creates for a in [c.address] if a in whole], "no address in clear"
    assert not [a for a in erased_earlier if a in whole]
    assert_projections_match_log(engine)


class CreateInFlight:
    """A create stopped before its commit: it holds ``stream_id``'s lock and has inserted the user's first key."""

    def __init__(self, engine: Engine, user_id: str, stream_id: str) -> None:
        self.key_id = ""
        self._held, self._commit = threading.Event(), threading.Event()
        self._thread = threading.Thread(target=self._write, args=(engine, user_id, stream_id))
        self._thread.start()
        assert self._held.wait(10), "the create took its lock and inserted its key"

    def _write(self, engine: Engine, user_id: str, stream_id: str) -> None:
        with engine.begin() as connection:
            lock_stream(connection, stream_id)
            self.key_id, _ = PostgresKeyring(connection).writing_key(user_id)
            self._held.set()
            self._commit.wait(10)

    def commit(self) -> str:
        self._commit.set()
        self._thread.join(10)
        return self.key_id


@pytest.mark.parametrize("stream_of", [reset_stream, otp_stream], ids=["reset", "otp"])
def test_an_erasure_waits_for_a_create_in_flight_and_destroys_the_key_it_inserted(
    ctx: ServiceContext, engine: Engine, stream_of: Callable[[str], str]
) -> None:
    create = CreateInFlight(engine, "1", stream_of("1"))
    answers: list[object] = []
    erasing = threading.Thread(target=lambda: answers.append(forget(ctx, "1", reason=REASON)))
    erasing.start()

    wait_until(lambda: lock_waiters(engine), what="the erasure to wait for the create's lock")
    assert answers == [], "nothing decided while the create is in flight"
    key_id = create.commit()
    erasing.join(10)

    [erasure] = answers
    assert isinstance(erasure, Erasure) and erasure.recorded and erasure.key_ids == (key_id,)
    with engine.connect() as connection:
        assert connection.execute(text("SELECT count(*) FROM subject_keys")).scalar_one() == 0


def test_a_new_users_reset_and_otp_creates_at_once_both_reach_the_address_index(
    racing_ctx: ServiceContext, engine: Engine
) -> None:
    """The two creates do not wait for each other; the one row they both fold must still hold both hashes."""
    users = [f"new-{n}" for n in range(50)]
    for number, user_id in enumerate(users):
        reset_address, otp_address = addresses(number)
        race(lambda: request_reset(racing_ctx, RequestReset(user_id, reset_address)),
             lambda: request_otp(racing_ctx, RequestOtp(user_id, otp_address, purpose="login")))

    with engine.connect() as connection:
        hashes = dict(connection.execute(text("SELECT user_id, hashes FROM address_index")).all())
    assert sorted(hashes) == sorted(users)
    assert [u for u in users if len(hashes[u].split()) != 2] == [], "each user is found by both addresses"
    assert_projections_match_log(engine)
