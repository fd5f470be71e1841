"""The case timeline is a pure drawing of the lookup's events: lanes, lease bars, attempts, links, the erasure."""

from __future__ import annotations

import itertools
import xml.etree.ElementTree as ElementTree
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

from attrs import frozen

from domain.counting import RequestsCounted
from domain.email import (
    DeliveryAbandoned, EmailQueued, LeaseClaimed, LeaseExpired, ProviderAccepted, SendAttemptFailed,
)
from domain.log import RecordedEvent
from domain.privacy import SubjectErased
from domain.otp_events import OtpChallengeIssued, OtpChallengeVerified, OtpCodeRejected, OtpVerificationFailed
from domain.reset_events import ResetRequested, ResetSuperseded, ResetTokenRejected
from infra.console.svg import BREAK, LABEL, RIGHT, WIDTH, draw

T0 = datetime(2024, 5, 1, 10, 0, tzinfo=UTC)
OLD, NEW = UUID(int=1), UUID(int=2)
M1, M2 = UUID(int=11), UUID(int=12)
L1, L2, L3 = UUID(int=21), UUID(int=22), UUID(int=23)
SVG = "{http://www.w3.org/2000/svg}"


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def recorded(events: list[tuple[str, Any]]) -> list[RecordedEvent]:
    """One transaction per event, except that a supersession shares its replacement's (as appended)."""
    positions = itertools.count(1)
    return [RecordedEvent(position, stream, 1, UUID(int=1000 + position), type(event).__name__, 1, event,
                          transaction_id=position + isinstance(event, ResetSuperseded))
            for (stream, event), position in zip(events, positions, strict=False)]


def requested(request_id: UUID, message_id: UUID, seconds: float) -> ResetRequested:
    return ResetRequested(request_id, "42", "ada@example.test", "k2", "hash", at(seconds), at(seconds + 1800),
                          message_id, None, "shop")


def queued(message_id: UUID, request_id: UUID, seconds: float) -> EmailQueued:
    return EmailQueued(message_id, "reset", "reset_link", "42", request_id, "ada@example.test", at(seconds))


def claimed(message_id: UUID, worker: str, lease: UUID, attempt: int, seconds: float) -> LeaseClaimed:
    return LeaseClaimed(message_id, worker, lease, at(seconds), at(seconds + 45), attempt)


def a_superseded_link_and_a_worker_killed_mid_lease() -> list[RecordedEvent]:
    return recorded([
        ("reset-user:42", requested(OLD, M1, 0)),
        (f"email:{M1}", queued(M1, OLD, 0)),
        (f"email:{M1}", claimed(M1, "w1", L1, 1, 1)),
        (f"email:{M1}", SendAttemptFailed(M1, L1, 1, at(2), "451 try later", True, at(30))),
        ("reset-user:42", ResetSuperseded(OLD, NEW, "new_request")),
        ("reset-user:42", requested(NEW, M2, 131)),
        (f"email:{M2}", queued(M2, NEW, 131)),
        (f"email:{M2}", claimed(M2, "w1", L2, 1, 132)),
        (f"email:{M2}", LeaseExpired(M2, "w1", L2, at(178))),
        (f"email:{M2}", claimed(M2, "w2", L3, 2, 180)),
        (f"email:{M2}", ProviderAccepted(M2, L3, 2, at(181), "smtp", "<m2@relay>", "k2")),
        ("subject:42", SubjectErased("42", at(300), ("dk1",))),
    ])


def shapes(svg: str, kind: str) -> list[dict[str, str]]:
    root = ElementTree.fromstring(svg)
    return [element.attrib for element in root.iter() if element.attrib.get("data-kind") == kind]


def test_each_lease_is_a_bar_naming_its_message_worker_attempt_and_how_it_ended() -> None:
    svg = draw(a_superseded_link_and_a_worker_killed_mid_lease())

    bars = [(b["data-message"], b["data-worker"], b["data-attempt"], b["data-outcome"]) for b in shapes(svg, "lease")]

    assert bars == [(str(M1), "w1", "1", "failed"), (str(M2), "w1", "1", "expired"), (str(M2), "w2", "2", "accepted")]


def test_a_killed_workers_bar_runs_from_its_claim_to_the_expiry_and_the_next_claim_starts_after_it() -> None:
    svg = draw(a_superseded_link_and_a_worker_killed_mid_lease())

    [_, expired, taken_over] = shapes(svg, "lease")

    assert float(expired["x"]) + float(expired["width"]) <= float(taken_over["x"])


def test_attempts_are_marked_with_the_providers_answer() -> None:
    root = ElementTree.fromstring(draw(a_superseded_link_and_a_worker_killed_mid_lease()))

    attempts = [e for e in root.iter() if e.attrib.get("data-kind") == "attempt"]

    assert [(a.attrib["data-message"], a.attrib["data-worker"], a.attrib["data-outcome"]) for a in attempts] == [
        (str(M1), "w1", "failed"), (str(M2), "w2", "accepted")]
    assert "451 try later" in attempts[0].find(f"{SVG}title").text
    assert "<m2@relay>" in attempts[1].find(f"{SVG}title").text


def test_one_lane_per_email_a_link_from_the_superseded_request_to_its_replacement_and_the_erasure() -> None:
    svg = draw(a_superseded_link_and_a_worker_killed_mid_lease())

    root = ElementTree.fromstring(svg)
    lanes = [e.attrib["data-message"] for e in root.iter() if e.attrib.get("class") == "lane"]
    [link] = shapes(svg, "supersession")
    requests = {r["data-request"]: r for r in shapes(svg, "request")}

    assert lanes == [str(M1), str(M2)]
    assert (link["data-request"], link["data-superseded-by"]) == (str(OLD), str(NEW))
    assert link["d"].startswith(f"M{requests[str(OLD)]['cx']},")
    assert link["d"].split()[-1].startswith(f"{requests[str(NEW)]['cx']},")
    assert len(shapes(svg, "erasure")) == 1


def test_a_rejected_presentation_of_the_superseded_link_is_a_verification_marker_with_its_reason() -> None:
    events = a_superseded_link_and_a_worker_killed_mid_lease()
    svg = draw([*events,
                RecordedEvent(90, "reset-user:42", 9, UUID(int=1090), "ResetTokenRejected", 1,
                              ResetTokenRejected(OLD, "superseded", at(400)), transaction_id=90),
                RecordedEvent(91, "otp-user:42", 1, UUID(int=1091), "OtpCodeRejected", 1,
                              OtpCodeRejected(UUID(int=3), "expired", at(401)), transaction_id=91)])

    marks = [(m["data-outcome"], m["data-request"], m.get("data-reason")) for m in shapes(svg, "verification")]

    assert marks == [("rejected", str(OLD), "superseded"), ("rejected", str(UUID(int=3)), "expired")]
    assert "ResetTokenRejected (superseded) at " in svg


def test_presentations_past_the_bound_are_one_counted_rejection_marker() -> None:
    counted = RequestsCounted("reset", "42", "rejected", at(3600), at(3700), at(3900), 490, ("shop",))
    # The count is appended in the transaction of the stream's next event, whose time it takes.
    svg = draw([*a_superseded_link_and_a_worker_killed_mid_lease(),
                RecordedEvent(92, "reset-user:42", 10, UUID(int=1092), "RequestsCounted", 1, counted,
                              transaction_id=92),
                RecordedEvent(93, "reset-user:42", 11, UUID(int=1093), "ResetTokenRejected", 1,
                              ResetTokenRejected(OLD, "superseded", at(7300)), transaction_id=92)])

    [mark] = [m for m in shapes(svg, "verification") if "data-count" in m]

    assert (mark["data-outcome"], mark["data-count"]) == ("rejected", "490")
    assert "490 more presentations refused from " in svg


def test_a_lease_still_held_is_drawn_open_to_its_expiry() -> None:
    svg = draw(recorded([(f"email:{M1}", queued(M1, OLD, 0)), (f"email:{M1}", claimed(M1, "w9", L1, 1, 1))]))

    [bar] = shapes(svg, "lease")

    assert (bar["data-worker"], bar["data-outcome"]) == ("w9", "open")


def test_text_from_the_log_is_escaped_in_the_picture() -> None:
    svg = draw(recorded([(f"email:{M1}", queued(M1, OLD, 0)),
                         (f"email:{M1}", claimed(M1, 'w"<script>', L1, 1, 1)),
                         (f"email:{M1}", SendAttemptFailed(M1, L1, 1, at(2), "<b>&", False, None))]))

    root = ElementTree.fromstring(svg)  # still well-formed XML

    assert "<script>" not in svg and root.find(f"{SVG}script") is None
    assert shapes(svg, "lease")[0]["data-worker"] == 'w"<script>'


def test_an_empty_case_is_an_empty_picture() -> None:
    assert shapes(draw([]), "lease") == []


CODE = UUID(int=5)


def a_code_entered_wrong_twice_then_right_and_presented_again_hours_later() -> list[RecordedEvent]:
    return recorded([
        ("otp-user:5", OtpChallengeIssued(CODE, "5", "di@example.test", "k2", 6, "login", at(0), at(600), M1, None,
                                          "shop")),
        (f"email:{M1}", queued(M1, CODE, 0)),
        (f"email:{M1}", claimed(M1, "w1", L1, 1, 1)),
        (f"email:{M1}", ProviderAccepted(M1, L1, 1, at(1), "smtp", "<m1@relay>", "k2")),
        ("otp-user:5", OtpVerificationFailed(CODE, 1, 1, at(30))),
        ("otp-user:5", OtpVerificationFailed(CODE, 2, 2, at(30))),
        ("otp-user:5", OtpChallengeVerified(CODE, at(30))),
        ("otp-user:5", OtpCodeRejected(CODE, "used", at(3 * 3600))),
    ])


def a_failed_last_attempt_and_the_abandonment_it_caused() -> list[RecordedEvent]:
    return recorded([
        ("reset-user:7", requested(OLD, M1, 0)),
        (f"email:{M1}", queued(M1, OLD, 0)),
        (f"email:{M1}", claimed(M1, "w1", L1, 1, 60)),
        (f"email:{M1}", SendAttemptFailed(M1, L1, 1, at(60), "provider busy (421)", False, None)),
        (f"email:{M1}", DeliveryAbandoned(M1, at(60), 1, "provider busy (421)", L1)),
    ])


def marks(svg: str) -> list[dict[str, str]]:
    """The point shapes: requests, presentations, emails queued, attempts, skips, abandonments, other facts."""
    return [m for kind in ("request", "verification", "queued", "attempt", "abandoned", "fact")
            for m in shapes(svg, kind)]


def y_of(mark: dict[str, str]) -> float:
    return float(mark.get("cy") or mark.get("y") or mark["d"].split(",")[1].split()[0])


def test_two_wrong_codes_and_the_right_one_are_three_marks_each_in_a_row_of_its_own() -> None:
    svg = draw(a_code_entered_wrong_twice_then_right_and_presented_again_hours_later())

    presented = [m for m in shapes(svg, "verification") if m["data-outcome"] in ("failed", "verified")]

    assert [m["data-outcome"] for m in presented] == ["failed", "failed", "verified"]
    assert len({m["x"] for m in presented}) == 1, "at one moment, so at one x"
    assert len({m["y"] for m in presented}) == 3, "one above the other, not on top of one another"


def test_each_mark_has_a_short_label_beside_it() -> None:
    svg = draw(a_code_entered_wrong_twice_then_right_and_presented_again_hours_later())

    root = ElementTree.fromstring(svg)
    labels = [t.text for t in root.iter(f"{SVG}text") if t.attrib.get("class") == "mark-label"]

    assert labels == ["code requested", "sent via smtp", "wrong code", "wrong code", "verified",
                      "refused: used"]


def test_a_failed_attempt_and_the_abandonment_at_the_same_moment_are_two_marks_one_above_the_other() -> None:
    svg = draw(a_failed_last_attempt_and_the_abandonment_it_caused())

    [failed] = shapes(svg, "attempt")
    [abandoned] = shapes(svg, "abandoned")

    assert y_of(abandoned) - y_of(failed) >= 16


def test_a_presentation_hours_after_the_rest_is_drawn_past_a_cut_in_the_axis_and_the_rest_keeps_the_width() -> None:
    svg = draw(a_code_entered_wrong_twice_then_right_and_presented_again_hours_later())

    [cut] = shapes(svg, "axis-break")
    xs = {m["data-outcome"]: float(m["x"]) for m in shapes(svg, "verification")}
    plot = WIDTH - LABEL - RIGHT - BREAK

    assert float(cut["data-seconds"]) == 3 * 3600 - 30
    assert xs["verified"] - LABEL >= plot * 0.9, "the first 30 seconds take the width, not 0.3% of it"
    assert xs["rejected"] + 5 <= WIDTH - RIGHT


def test_no_cut_when_no_stretch_is_quiet_for_long() -> None:
    assert shapes(draw(a_superseded_link_and_a_worker_killed_mid_lease()), "axis-break") == []


def test_a_mark_at_the_right_edge_writes_its_label_to_its_left_inside_the_picture() -> None:
    svg = draw(a_code_entered_wrong_twice_then_right_and_presented_again_hours_later())

    root = ElementTree.fromstring(svg)
    [last] = [t for t in root.iter(f"{SVG}text") if t.text == "refused: used"]

    assert last.attrib["text-anchor"] == "end"
    assert float(last.attrib["x"]) - float(last.attrib["textLength"]) >= LABEL


def test_a_fact_of_a_kind_the_picture_does_not_name_is_a_dot_named_by_its_event_type() -> None:
    bounce = RecordedEvent(99, f"email:{M2}", 9, UUID(int=1099), "EmailBounced", 1, Bounced(M2, "mailbox full"),
                           recorded_at=at(200), transaction_id=99)

    svg = draw([*a_superseded_link_and_a_worker_killed_mid_lease(), bounce])

    [fact] = shapes(svg, "fact")
    assert fact["data-event"] == "EmailBounced"
    assert ">EmailBounced</text>" in svg


@frozen
class Bounced:
    message_id: UUID
    reason: str
def test_what_the_provider_reported_later_is_a_mark_on_the_emails_lane() -> None:
    from domain.email import ProviderBounced, ProviderComplained

    events = a_superseded_link_and_a_worker_killed_mid_lease()
    last = events[-1].global_position
    events += recorded([(f"email:{M2}", ProviderBounced(M2, "42", at(400), "postmark", True, "550 5.1.1 no user")),
                        (f"email:{M2}", ProviderComplained(M2, "42", at(500), "sendgrid"))])[-2:]
    events[-2:] = [RecordedEvent(last + n, r.stream_id, 1, UUID(int=2000 + n), r.event_type, 1, r.event,
                                 transaction_id=last + n) for n, r in enumerate(events[-2:], start=1)]
    root = ElementTree.fromstring(draw(events))

    marks = [e.attrib for e in root.iter() if e.attrib.get("data-kind") == "feedback"]

    assert [(m["data-message"], m["data-outcome"]) for m in marks] == [(str(M2), "bounced"), (str(M2), "complained")]
