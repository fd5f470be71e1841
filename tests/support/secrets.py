"""The secrets a test's email would carry: nonces for domain tests, tokens and codes read back from the log.

A token or code follows from the key, the request id and the request's
secret nonce (domain/tokens.py, derivation 2), so a test that plays the
user reads the nonce from the log (opened under the user's data key), as
the worker does when it renders the email.
"""

from __future__ import annotations

from uuid import UUID

from sqlalchemy import Engine, text

from domain.otp import otp_code_for
from domain.otp_state import OtpChallenge, fold_otp
from domain.reset import reset_token_for
from domain.reset_state import ResetRequest, fold_reset
from domain.tokens import NONCE_BYTES, TokenKeys, nonce_text
from infra.eventlog.postgres import PostgresEventStore

STREAM_OF = text("""
    SELECT stream_id FROM events
     WHERE event_type IN ('ResetRequested', 'OtpChallengeIssued')
       AND coalesce(payload->>'request_id', payload->>'challenge_id') = :id
""")


def nonce(n: int) -> str:
    """A fixed nonce for domain tests, different for each ``n``."""
    return nonce_text(n.to_bytes(NONCE_BYTES, "big"))


def _request(engine: Engine, request_id: UUID | str) -> ResetRequest | OtpChallenge:
    request_id = UUID(str(request_id))
    with engine.connect() as connection:
        stream_id = connection.execute(STREAM_OF, {"id": str(request_id)}).scalar_one()
        events = [r.event for r in PostgresEventStore(connection).load(stream_id)]
    # Folded alone: the stream's state forgets closed requests after a while, the log does not.
    if stream_id.startswith("otp-user:"):
        [issued] = [e for e in events if getattr(e, "challenge_id", None) == request_id and hasattr(e, "nonce")]
        return fold_otp([issued]).challenges[request_id]
    [requested] = [e for e in events if getattr(e, "request_id", None) == request_id and hasattr(e, "nonce")]
    return fold_reset([requested]).requests[request_id]


def reset_token_of(engine: Engine, keys: TokenKeys, request_id: UUID | str) -> str:
    """The token the reset email of ``request_id`` carries."""
    request = _request(engine, request_id)
    assert isinstance(request, ResetRequest)
    return reset_token_for(request, keys)


def otp_code_of(engine: Engine, keys: TokenKeys, challenge_id: UUID | str) -> str:
    """The code the email of ``challenge_id`` carries."""
    challenge = _request(engine, challenge_id)
    assert isinstance(challenge, OtpChallenge)
    return otp_code_for(challenge, keys)
