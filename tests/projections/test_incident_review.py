"""The three worked cases of docs/incident-review.md: `explain` answers each from the log alone."""

from __future__ import annotations

from sqlalchemy import Engine

from infra.history import explain, history
from infra.services import ServiceContext
from tests.support.incidents import duplicate_emails, later, missing_email, stale_link
from tests.support.replay import assert_projections_match_log


def test_a_duplicate_email_complaint_is_explained_by_two_requests_and_a_crashed_worker(
    ctx: ServiceContext, engine: Engine
) -> None:
    ids = duplicate_emails(ctx, engine)
    review = history(engine, "42", now=later())
    text = "\n".join(review.findings)
    print(text)
    assert f"Reset request {ids['first_request']} was superseded by {ids['second_request']} at 2024-05-01 10:02:11.000+00:00" in text
    assert (f"Reset request {ids['second_request']}'s email {ids['second_message']} was accepted by provider smtp at "
            "2024-05-01 10:03:00.000+00:00") in text
    assert "on attempt 2 by w2, after the lease of w1 expired." in text
    assert f"2 emails to user 42 were accepted by the provider" in text
    assert_projections_match_log(engine)
