"""The top of a case page answers the three complaints in a line each, from the case's events alone."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from uuid import UUID

import pytest
from attrs import evolve, frozen
from sqlalchemy import Engine

from domain.errors import TokenInvalid
from domain.log import RecordedEvent
from domain.reset_events import ResetRequestRefused
from domain.tenants import DEFAULT_TENANT
from infra.clock import ManualClock
from infra.console.cases import find_case
from infra.console.glance import Glance, after, glance, plain
from infra.services.reset import verify_token
from infra.services.unit_of_work import ServiceContext
from tests.console.support import NO_EMAIL_ANSWERS, STALE_LINK_ANSWERS, TWO_EMAILS_ANSWERS
from tests.console.test_svg import a_superseded_link_and_a_worker_killed_mid_lease
from tests.support.incidents import START, WEB, duplicate_emails, later, missing_email, stale_link
from tests.support.secrets import reset_token_of


def summary_of(engine: Engine, user_id: str) -> Glance:
    case = find_case(engine, DEFAULT_TENANT, "user", user_id, now=later())
    assert case is not None
    return glance(case.events, now=later())


def answers(summary: Glance) -> list[tuple[str, str]]:
    return [(question, plain(line)) for question, line in summary.answers]


def facts(summary: Glance) -> dict[str, str]:
    return {name: plain(line) for name, line in summary.facts}


def test_two_emails_are_two_requests_and_an_email_handed_over_again_after_a_worker_stopped(
    ctx: ServiceContext, engine: Engine
) -> None:
    ids = duplicate_emails(ctx, engine)
    with pytest.raises(TokenInvalid):
        verify_token(evolve(ctx, clock=ManualClock(START + timedelta(minutes=5))),
                     reset_token_of(engine, ctx.keys, ids["first_request"]), WEB)

    summary = summary_of(engine, "42")

    assert answers(summary) == TWO_EMAILS_ANSWERS
    assert facts(summary) == {
        "Latest link": "request …00000a02, made at +2 min 11 s; email …00000a03 sent at +3 min through smtp on "
                       "attempt 2; not used: it expired at +32 min 11 s.",
        "Refused presentations": "1: the link of request …00000a00 at +5 min (superseded).",
        "Abandoned or bounced": "none.",
    }
    assert summary.anchor == START


def test_no_email_is_an_email_abandoned_after_the_provider_refused_every_attempt(
    ctx: ServiceContext, engine: Engine
) -> None:
    missing_email(ctx, engine)

    summary = summary_of(engine, "7")

    assert answers(summary) == NO_EMAIL_ANSWERS
    assert facts(summary)["Abandoned or bounced"] == (
        "email …00000b01 abandoned at +5 min after 5 attempts (provider busy (421)).")


def test_a_stale_link_is_one_replaced_by_a_newer_request_whose_link_was_used(
    ctx: ServiceContext, engine: Engine
) -> None:
    stale_link(ctx, engine)

    summary = summary_of(engine, "9")

    assert answers(summary) == STALE_LINK_ANSWERS
    assert facts(summary)["Latest link"] == (
        "request …00000c02, made at +5 min; email …00000c03 sent at +5 min 1 s through smtp; used at +8 min.")


def test_ids_are_parts_of_their_own_so_that_the_page_can_show_them_short_and_copy_them_whole() -> None:
    summary = glance(a_superseded_link_and_a_worker_killed_mid_lease(), now=START)

    [(_, line)] = [fact for fact in summary.facts if fact[0] == "Latest link"]

    assert [part for part in line if isinstance(part, UUID)] == [UUID(int=2), UUID(int=12)]


@frozen
class EmailBounced:
    """A fact the summary does not know (provider feedback, say): it is told by its event type."""

    message_id: UUID
    reason: str


def test_a_fact_of_a_kind_it_does_not_know_is_told_by_its_event_type_after_the_email_it_is_about() -> None:
    bounce = RecordedEvent(99, f"email:{UUID(int=12)}", 9, UUID(int=1099), "EmailBounced", 1,
                           EmailBounced(UUID(int=12), "mailbox full"), recorded_at=START + timedelta(minutes=10),
                           transaction_id=99)

    summary = glance([*a_superseded_link_and_a_worker_killed_mid_lease(), bounce], now=START)

    assert facts(summary)["Abandoned or bounced"] == "email …0000000c EmailBounced at +10 min."
    assert "sent at +3 min 1 s through smtp on attempt 2, then EmailBounced at +10 min" in facts(summary)["Latest link"]


def test_a_later_fact_that_is_no_trouble_is_told_after_the_email_but_not_among_the_bounced() -> None:
    delivered = RecordedEvent(99, f"email:{UUID(int=12)}", 9, UUID(int=1099), "EmailDelivered", 1,
                              EmailBounced(UUID(int=12), "250 ok"), recorded_at=START + timedelta(minutes=4),
                              transaction_id=99)

    summary = glance([*a_superseded_link_and_a_worker_killed_mid_lease(), delivered], now=START)

    assert facts(summary)["Abandoned or bounced"] == "none."
    assert "on attempt 2, then EmailDelivered at +4 min;" in facts(summary)["Latest link"]


@frozen
class RequestWithdrawn:
    """An ending of a request the summary does not know (a support action, say)."""

    request_id: UUID
    withdrawn_at: datetime


def test_a_request_ended_by_a_fact_of_a_kind_it_does_not_know_is_not_used_under_that_event_type() -> None:
    events = a_superseded_link_and_a_worker_killed_mid_lease()[:-1]  # not erased
    withdrawn = RecordedEvent(99, "reset-user:42", 9, UUID(int=1099), "RequestWithdrawn", 1,
                              RequestWithdrawn(UUID(int=2), START + timedelta(minutes=6)),
                              recorded_at=START + timedelta(minutes=6), transaction_id=99)

    summary = glance([*events, withdrawn], now=START)

    assert facts(summary)["Latest link"].endswith("; not used: RequestWithdrawn at +6 min.")


def test_times_are_told_relative_to_the_first_request() -> None:
    told = [after(START, START + timedelta(seconds=s)) for s in (0, 45, 120, 131, 3600 + 300, 90000, -5)]

    assert told == ["+0 s", "+45 s", "+2 min", "+2 min 11 s", "+1 h 5 min", "+1 d 1 h", "-5 s"]


def test_the_console_guide_quotes_the_first_cases_answers_as_the_page_gives_them() -> None:
    guide = (Path(__file__).resolve().parents[2] / "docs" / "console.md").read_text()

    for question, answer in TWO_EMAILS_ANSWERS:
        assert f"| {question} | {answer} |" in guide


def test_no_email_for_a_request_refused_past_the_limit_says_so() -> None:
    events = a_superseded_link_and_a_worker_killed_mid_lease()[:-1]
    refused = RecordedEvent(99, "reset-user:42", 9, UUID(int=1099), "ResetRequestRefused", 1,
                            ResetRequestRefused("42", "rate_limited", START + timedelta(minutes=7),
                                                START + timedelta(hours=1)), transaction_id=99)

    summary = glance([*events, refused], now=START)

    assert answers(summary)[1] == ("No email?", "No link was sent for the latest request: it was refused "
                                                "(rate_limited) at +7 min, and no email was queued.")
