"""Rounds of a reset create, an OTP create and an erasure of one user started together, and what they must leave.

A round's three calls are released at once by a ``threading.Barrier``; the
round records what each answered. ``judge`` then reads the log and
``subject_keys`` and orders each create against the round's erasure by
their global positions, never by how the threads happened to be scheduled:

- a create the log holds before the erasure is erased with it: its data key
  is among the ``SubjectErased`` event's key ids and no longer in
  ``subject_keys``, its address reads ``[erased]`` wherever it is opened, and
  its link or code is answered as an unknown one;
- a create after the erasure is the user coming back: a new key, still
  alive, its address readable and its link or code working;
- an erasure that recorded nothing (nothing left to destroy, or no such user
  yet) ran before both creates, which therefore both still read;
- once a worker has drained the outbox, the email of a create before the
  erasure was skipped as "erased" and never reached the provider, and the
  email of a create after it was sent.

What ``judge`` finds wrong comes back as sentences naming the round and the
user, never an address or a secret.
"""

from __future__ import annotations

import mailbox
import threading
from collections.abc import Callable, Collection, Sequence
from email import message_from_bytes
from email.policy import default as default_policy
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

from attrs import define, frozen
from sqlalchemy import Engine, text

from domain.errors import CodeRejected, NotFound, TokenInvalid
from domain.log import Checkpoint
from domain.reset import RequestReset
from domain.tokens import derive_otp_code, derive_reset_token, hash_token
from infra.clock import ManualClock
from infra.eventlog.personal_data import ERASED, key_id_of
from infra.eventlog.reader import HORIZON, Reading, read_page
from infra.services.otp import verify_code
from infra.services.privacy import forget
from infra.services.reset import request_reset, verify_token
from infra.services.unit_of_work import ServiceContext, random_nonce

REASON = "ticket 36"
RACE_TIMEOUT = 60  # seconds: a round whose threads are still running then is stuck, not slow

USER_EVENTS = text("""
    SELECT global_position, stream_id, stream_version, event_type, payload FROM events
     WHERE stream_id = ANY(CAST(:streams AS text[])) ORDER BY global_position
""")
USER_KEYS = text("SELECT key_id FROM subject_keys WHERE user_id = :user_id")
DELIVERY = text("SELECT message_id, state, skip_reason FROM email_outbox WHERE message_id = ANY(:message_ids)")


# A round's three calls, given its user and the reset's and the OTP create's addresses.
Calls = Callable[[str, str, str], list[Callable[[], Any]]]


class NonceRecorder:
    """A ``ServiceContext.new_nonce`` that keeps every nonce it hands out, so a test can derive the secrets.

    A test that plays the user needs a request's token or code after its
    nonce was erased from the log: it keeps the nonces as they are made.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.issued: list[str] = []

    def __call__(self) -> str:
        nonce = random_nonce()
        with self._lock:
            self.issued.append(nonce)
        return nonce


def race(*calls: Callable[[], Any]) -> list[Any]:
    """Run ``calls`` on threads of their own, released together; each one's answer or the exception it raised."""
    barrier = threading.Barrier(len(calls))
    answers: list[Any] = [None] * len(calls)

    def run(index: int, call: Callable[[], Any]) -> None:
        barrier.wait()
        try:
            answers[index] = call()
        except Exception as error:  # noqa: BLE001 - the answer of the call, judged by the test
            answers[index] = error

    threads = [threading.Thread(target=run, args=(i, call)) for i, call in enumerate(calls)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(RACE_TIMEOUT)
    assert not any(thread.is_alive() for thread in threads), "a round's calls never finished: a deadlock?"
    return answers


@frozen
class Create:
    """A request a round's create issued: its flow ("reset" or "otp"), its id, its email's, and the address."""

    flow: str
    request_id: UUID
    message_id: UUID
    address: str


@define
class Round:
    """One round: its user, what its creates issued, what its erasure answered, and the nonces made meanwhile."""

    number: int
    user_id: str  # as events and subject_keys spell it (the default tenant's ids are not prefixed)
    creates: list[Create]
    erasure: bool | None  # recorded True or False; None: no such user yet (nothing was written)
    nonces: Sequence[str]
    erasures_before: int  # SubjectErased events of the user before the round


def addresses(number: int) -> tuple[str, str]:
    """The addresses of round ``number``'s reset and OTP creates."""
    return f"reset-{number}@example.test", f"otp-{number}@example.test"


def erase_before(ctx: ServiceContext, clock: ManualClock, users: Sequence[str]) -> list[str]:
    """Give each user a request, erase them, and move past the cooldown; the addresses erased."""
    erased = []
    for user_id in users:
        address = f"before-{user_id}@example.test"
        request_reset(ctx, RequestReset(user_id, address))
        assert forget(ctx, user_id, reason=REASON).recorded
        erased.append(address)
    clock.advance(120)  # so that the rounds' creates issue new requests rather than answer the erased ones
    return erased


def play(nonces: NonceRecorder, number: int, user_id: str, erasures_before: int, calls: Calls) -> Round:
    """One round of ``calls(user_id, reset address, otp address)``: the reset, the OTP create, the erasure.

    The creates answer an object with ``request_id`` and ``message_id``; the
    erasure one with ``recorded``, or ``NotFound``.
    """
    reset_address, otp_address = addresses(number)
    made = len(nonces.issued)
    reset, otp, erasure = race(*calls(user_id, reset_address, otp_address))
    for answer in (reset, otp):
        if isinstance(answer, Exception):
            raise answer
    if isinstance(erasure, NotFound):
        recorded = None
    elif isinstance(erasure, Exception):
        raise erasure
    else:
        recorded = erasure.recorded
    creates = [Create("reset", reset.request_id, reset.message_id, reset_address),
               Create("otp", otp.request_id, otp.message_id, otp_address)]
    return Round(number, user_id, creates, recorded, nonces.issued[made:], erasures_before)


@frozen
class Verdict:
    """What the rounds left, counted; ``wrong`` says what broke a promise, one sentence each."""

    recorded: int  # rounds whose erasure was recorded
    erased_creates: int  # creates the log holds before their round's erasure
    creates_after: int  # creates after a recorded erasure (the user came back)
    broken: int  # rounds with something wrong
    broken_recorded: int  # of them, rounds whose erasure answered recorded
    wrong: list[str]

    def summary(self) -> str:
        return (f"{self.broken} rounds broke a promise, {self.broken_recorded} of them among the {self.recorded} "
                "whose erasure was recorded:\n" + "\n".join(self.wrong))


def judge(ctx: ServiceContext, rounds: Sequence[Round], *, delivered_to: Collection[str],
          earlier_addresses: Sequence[str] = ()) -> Verdict:
    """Check every round against the log, ``subject_keys``, the outbox and the services (see the module's
    docstring), once a worker has drained the outbox into a provider that received mail for ``delivered_to``.

    ``earlier_addresses`` were erased before the rounds began: none may read.
    """
    readable = readable_addresses(ctx.engine)
    wrong = [f"an address erased before the rounds reads again ({n} of {len(earlier_addresses)})"
             for n in [sum(1 for a in earlier_addresses if a in readable)] if n]
    recorded = erased_creates = creates_after = broken = broken_recorded = 0
    for played in rounds:
        before, after, problems = _judge_round(ctx, played, readable)
        problems += _judge_delivery(ctx.engine, before, after, delivered_to)
        recorded += played.erasure is True
        erased_creates += len(before)
        creates_after += len(after) if played.erasure is True else 0
        broken += bool(problems)
        broken_recorded += bool(problems) and played.erasure is True
        wrong += [f"round {played.number} (user {played.user_id!r}): {problem}" for problem in problems]
    return Verdict(recorded, erased_creates, creates_after, broken, broken_recorded, wrong)


def _judge_round(
    ctx: ServiceContext, played: Round, readable: set[str]
) -> tuple[list[Create], list[Create], list[str]]:
    """The round's creates before its erasure, those after it, and what is wrong with them."""
    user = played.user_id
    with ctx.engine.connect() as connection:
        rows = connection.execute(USER_EVENTS, {
            "streams": [f"reset-user:{user}", f"otp-user:{user}", f"subject:{user}"]}).all()
        live_keys = set(connection.execute(USER_KEYS, {"user_id": user}).scalars())
    issued = {UUID(row.payload.get("request_id") or row.payload["challenge_id"]): row for row in rows
              if row.event_type in ("ResetRequested", "OtpChallengeIssued")}
    problems = []
    missing = [c for c in played.creates if c.request_id not in issued]
    if missing:
        return [], [], [f"{len(missing)} answered create(s) not in the log"]
    key_of = {c.request_id: key_id_of(issued[c.request_id].payload["recipient"]) for c in played.creates}
    position = {c.request_id: issued[c.request_id].global_position for c in played.creates}
    erased = [row for row in rows if row.event_type == "SubjectErased"
              and row.stream_version == played.erasures_before + 1]
    if played.erasure is True:
        if not erased:
            return [], [], ["the erasure answered recorded, and the log holds no SubjectErased of it"]
        [erasure] = erased
        destroyed = set(erasure.payload["key_ids"])
        before = [c for c in played.creates if position[c.request_id] < erasure.global_position]
        after = [c for c in played.creates if position[c.request_id] > erasure.global_position]
        if not destroyed:
            problems.append("SubjectErased recorded with no key destroyed")
        for create in before:
            if key_of[create.request_id] not in destroyed:
                problems.append(f"the {create.flow} create before the erasure was sealed under a key it did not name")
            if key_of[create.request_id] in live_keys:
                problems.append(f"the {create.flow} create before the erasure kept its data key")
        stray = live_keys - {key_of[c.request_id] for c in after}
        if stray:
            problems.append(f"{len(stray)} data key(s) survive that no create after the erasure made")
    else:
        if erased:
            problems.append("the erasure answered not recorded, and the log holds a SubjectErased of the round")
        before, after = [], list(played.creates)
    for create in after:
        if key_of[create.request_id] not in live_keys:
            problems.append(f"the {create.flow} create after the erasure lost its data key")
    secrets = _secrets(ctx, played, issued)
    for create in before:
        if create.address in readable:
            problems.append(f"the {create.flow} create's address still reads after the erasure")
        if _verifies(ctx, played, create, secrets[create.request_id]):
            problems.append(f"the {create.flow} create's {'link' if create.flow == 'reset' else 'code'} "
                            "still verifies after the erasure")
    for create in after:
        if create.address not in readable:
            problems.append(f"the {create.flow} create after the erasure does not read")
        if not _verifies(ctx, played, create, secrets[create.request_id]):
            problems.append(f"the {create.flow} create after the erasure does not verify")
    return before, after, problems


def _judge_delivery(engine: Engine, before: Sequence[Create], after: Sequence[Create],
                    delivered_to: Collection[str]) -> list[str]:
    """Emails of creates before the erasure skipped as erased and never delivered; those after it sent."""
    with engine.connect() as connection:
        rows = {row.message_id: (row.state, row.skip_reason) for row in connection.execute(
            DELIVERY, {"message_ids": [c.message_id for c in (*before, *after)]})}
    problems = []
    for create in before:
        if rows.get(create.message_id) != ("skipped", "erased"):
            problems.append(f"the {create.flow} create's email before the erasure ended {rows.get(create.message_id)}")
        if create.address in delivered_to:
            problems.append(f"the {create.flow} create's email before the erasure reached the provider")
    for create in after:
        if rows.get(create.message_id, ("",))[0] != "sent" or create.address not in delivered_to:
            problems.append(f"the {create.flow} create's email after the erasure was not sent")
    return problems


def _secrets(ctx: ServiceContext, played: Round, issued: dict[UUID, Any]) -> dict[UUID, str]:
    """The token or code each create's email would carry, derived from the nonces the round made.

    A round makes one nonce per create: the reset's is the one whose token
    hashes to the event's ``token_hash``; the code's is the one left.
    """
    assert len(played.nonces) == len(played.creates), "each create of a round issued a new request"
    secrets, left = {}, list(played.nonces)
    for create in sorted(played.creates, key=lambda c: c.flow != "reset"):  # the resets first
        payload = issued[create.request_id].payload
        key = ctx.keys.key(payload["key_id"])
        if create.flow == "reset":
            nonce = next(n for n in left
                         if hash_token(derive_reset_token(key, create.request_id, n)) == payload["token_hash"])
            secrets[create.request_id] = derive_reset_token(key, create.request_id, nonce)
        else:
            [nonce] = left
            secrets[create.request_id] = derive_otp_code(key, create.request_id, payload["digits"], nonce)
        left.remove(nonce)
    return secrets


def _verifies(ctx: ServiceContext, played: Round, create: Create, secret: str) -> bool:
    """Whether the link or code works; an unusable one must be answered exactly as an unknown one."""
    local_id = played.user_id
    try:
        if create.flow == "reset":
            verify_token(ctx, secret)
        else:
            verify_code(ctx, create.request_id, secret, user_id=local_id)
        return True
    except TokenInvalid as refused:
        assert str(refused) == str(_unknown_link_answer(ctx)), "a dead link is answered as an unknown one"
        return False
    except CodeRejected as refused:
        assert str(refused) == str(_unknown_code_answer(ctx, local_id, secret)), "answered as an unknown code"
        return False


def _unknown_link_answer(ctx: ServiceContext) -> TokenInvalid:
    try:
        verify_token(ctx, "A" * 43)
    except TokenInvalid as unknown:
        return unknown
    raise AssertionError("a made-up token verified")


def _unknown_code_answer(ctx: ServiceContext, user_id: str, code: str) -> CodeRejected:
    try:
        verify_code(ctx, uuid4(), code, user_id=user_id)
    except CodeRejected as unknown:
        return unknown
    raise AssertionError("a made-up challenge verified")


def readable_addresses(engine: Engine) -> set[str]:
    """Every recipient the log still opens to, read as services, workers and reviewers read it."""
    with engine.connect() as connection:
        events = read_page(connection, Checkpoint(), HORIZON, 1_000_000, reading=Reading(personal_data=True))
    return {r.event.recipient for r in events if isinstance(getattr(r.event, "recipient", None), str)} - {ERASED}


def maildir_recipients(path: Path) -> set[str]:
    """The addresses a Maildir provider delivered to."""
    if not path.exists():
        return set()
    box = mailbox.Maildir(path, create=False)
    return {message_from_bytes(box.get_bytes(key), policy=default_policy)["To"] for key in box.keys()}
