"""Support actions on one user: withdraw their open links and codes, or send them a fresh one.

An application's support staff act on a user without erasing them. Both
actions are recorded with who acted (the event's metadata) and why:
``ResetInvalidated`` and ``OtpChallengeInvalidated`` carry the reason, and a
fresh request made on the user's behalf is an ordinary request whose
metadata names the support actor and reason (``support_metadata``), so it
meets every limit a create meets.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any
from uuid import UUID

from attrs import frozen

from domain.decisions import Decision
from domain.errors import InvalidInput
from domain.input_checks import operator_reason, require_utc
from domain.otp_events import OtpChallengeInvalidated
from domain.otp_state import OtpState, open_challenges
from domain.reset_events import ResetInvalidated
from domain.reset_state import ResetState, open_requests

FLOWS = ("reset", "otp")
# The metadata key holding a support action's reason, beside the usual actor and client.
SUPPORT_REASON = "support_reason"


@frozen
class Withdrawn:
    """What one flow's invalidation closed: the ids of the requests (or challenges) that were open."""

    request_ids: tuple[UUID, ...]


def support_reason(reason: object) -> str:
    """Why support acts, trimmed; ``InvalidInput`` unless it is one short line without an address."""
    return operator_reason(reason, blank="a support action needs a reason (--reason): say why, e.g. the ticket",
                           instead="name the ticket instead")


def check_flow(flow: object) -> str:
    """"reset" or "otp"; ``InvalidInput`` for anything else."""
    if not isinstance(flow, str) or flow not in FLOWS:
        raise InvalidInput(f"the flow is 'reset' or 'otp', not {str(flow)[:20]!r}")
    return flow


def support_metadata(metadata: Mapping[str, Any], reason: str, action: str) -> dict[str, Any]:
    """``metadata`` of the caller, with the support action and its reason: what a fresh request carries."""
    return {**metadata, "support_action": action, SUPPORT_REASON: reason}


def decide_reset_invalidation(state: ResetState, *, reason: str, now: datetime) -> Decision:
    """Close every open, unexpired reset request of the user; nothing open, nothing written.

    An expired request is left as it is: its link already fails, and saying support withdrew it would be untrue.
    """
    require_utc(now)
    reason = support_reason(reason)
    events = tuple(ResetInvalidated(r.request_id, reason, now) for r in open_requests(state) if now < r.expires_at)
    return Decision(events=events, emails=(), outcome=Withdrawn(tuple(e.request_id for e in events)))


def decide_otp_invalidation(state: OtpState, *, reason: str, now: datetime) -> Decision:
    """Close every open, unexpired OTP challenge of the user; nothing open, nothing written."""
    require_utc(now)
    reason = support_reason(reason)
    events = tuple(OtpChallengeInvalidated(c.challenge_id, reason, now) for c in open_challenges(state)
                   if now < c.expires_at)
    return Decision(events=events, emails=(), outcome=Withdrawn(tuple(e.challenge_id for e in events)))
