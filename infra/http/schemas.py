"""JSON Schemas of what the API accepts and answers: one source for validation and /openapi.json.

Patterns are anchored and restricted to what both ECMA-262 (OpenAPI tools)
and Python's ``re`` read the same way, so the document generators work from
is exactly what the server enforces.
"""

from __future__ import annotations

from typing import Any

Schema = dict[str, Any]

# Printable ASCII without space: what the domain accepts as an id, minus the
# Unicode corners that JSON Schema cannot describe.
ASCII_TOKEN = "[!-~]"
USER_ID: Schema = {
    "type": "string", "minLength": 1, "maxLength": 200, "pattern": f"^{ASCII_TOKEN}+$",
    "description": "The application's id for the user: 1-200 printable ASCII characters, no spaces.",
    "examples": ["42"],
}
# The domain's one address rule (domain/addresses.py) in JSON Schema, so
# that the document says exactly what the server enforces, although the
# server asks the domain, not these patterns: a dot-atom local part, a
# domain of two or more LDH labels, and two facts a single pattern could only
# state with lookaheads (which generators of examples cannot follow): the
# local part is at most 64 octets, and no encoded-word ("=?") appears. Those
# two patterns match a part of the value on purpose (a prefix, a substring).
# tests/http/test_hostile_addresses.py checks that schema and rule agree.
_ATEXT = "[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]"
_LABEL = "[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
EMAIL_PATTERN = rf"^{_ATEXT}+(?:\.{_ATEXT}+)*@{_LABEL}(?:\.{_LABEL})+$"
EMAIL: Schema = {
    "type": "string", "maxLength": 254, "pattern": EMAIL_PATTERN,
    "allOf": [{"pattern": "^[^@]{1,64}@"}],
    "not": {"pattern": "=\\?"},
    "description": "Where to send the email: a single plain ASCII address (local@domain), nothing around it, "
                   "at most 254 characters. The part before @ is a dot-atom of at most 64 characters (no "
                   "leading, trailing or doubled dot, no quotes, no encoded-word \"=?\"); the domain is two or "
                   "more dot-separated labels of letters, digits and inner hyphens (an internationalised domain "
                   "in its xn-- form: SMTPUTF8 is not supported).",
    "examples": ["ada@example.com"],
}
PURPOSE: Schema = {
    "type": "string", "minLength": 1, "maxLength": 64, "pattern": "^[A-Za-z0-9_.:-]+$", "default": "login",
    "description": "What the code is for; shown to the user in the email.",
}
TOKEN: Schema = {
    "type": "string", "minLength": 1, "maxLength": 512,
    "description": "The token from the reset link.",
}
CODE: Schema = {
    "type": "string", "pattern": "^[0-9]{4,10}$",
    "description": "The code from the email: exactly as many digits as the challenge was issued with "
                   "(AUTHLEDGER_OTP_DIGITS at the time, 4-10, 6 by default).",
}
# The canonical form only: 8-4-4-4-12 hex digits. Python's UUID() also reads
# "{...}", "urn:uuid:..." and 32 bare digits, which `format: uuid` forbids.
UUID_PATTERN = "^[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}$"
UUID: Schema = {"type": "string", "format": "uuid", "pattern": UUID_PATTERN,
                "description": "A UUID in its canonical form, e.g. 123e4567-e89b-12d3-a456-426614174000."}
TIMESTAMP: Schema = {"type": "string", "format": "date-time"}

# A Structured Field string (the IETF draft's form, quotes included, no
# escapes) or the bare token most clients send; both name the same key.
IDEMPOTENCY_KEY_PATTERN = r'^(?:"[!#-\[\]-~]{1,255}"|[!-~]{1,255})$'
REQUEST_ID_PATTERN = "^[A-Za-z0-9._:@/+=-]{1,128}$"


def _object(properties: dict[str, Schema], required: list[str]) -> Schema:
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


# Request bodies.
RESET_CREATE = _object({"user_id": USER_ID, "email": EMAIL}, ["user_id", "email"])
TOKEN_BODY = _object({"token": TOKEN}, ["token"])
OTP_CREATE = _object({"user_id": USER_ID, "email": EMAIL, "purpose": PURPOSE}, ["user_id", "email"])
CODE_BODY = _object({"code": CODE}, ["code"])

# Responses.
REUSED: Schema = {
    "type": "boolean",
    "description": "True when nothing new was made: a replay of this Idempotency-Key, or a repeat within "
                   "the cooldown answered with the open request.",
}
RESET_CREATED = _object(
    {"request_id": UUID, "message_id": UUID, "expires_at": TIMESTAMP, "reused": REUSED},
    ["request_id", "message_id", "expires_at", "reused"],
)
RESET_VALID = _object(
    {"valid": {"const": True}, "request_id": UUID, "user_id": {"type": "string"}, "expires_at": TIMESTAMP},
    ["valid", "request_id", "user_id", "expires_at"],
)
RESET_CONSUMED = _object(
    {"consumed": {"const": True}, "request_id": UUID, "user_id": {"type": "string"}, "completed_at": TIMESTAMP},
    ["consumed", "request_id", "user_id", "completed_at"],
)
OTP_CREATED = _object(
    {"challenge_id": UUID, "message_id": UUID, "expires_at": TIMESTAMP, "reused": REUSED},
    ["challenge_id", "message_id", "expires_at", "reused"],
)
OTP_VERIFIED = _object({"verified": {"const": True}, "challenge_id": UUID}, ["verified", "challenge_id"])
TIMELINE_EVENT = _object(
    {
        "position": {"type": "integer"},
        "stream": {"type": "string"},
        "version": {"type": "integer"},
        "type": {"type": "string"},
        "schema_version": {"type": "integer"},
        "recorded_at": TIMESTAMP,
        "payload": {"type": "object"},
        "metadata": {"type": "object"},
    },
    ["position", "stream", "version", "type", "schema_version", "recorded_at", "payload", "metadata"],
)
TIMELINE = _object(
    {
        "user_id": {"type": "string"},
        "request_id": {"type": ["string", "null"], "format": "uuid"},
        "message_id": {"type": ["string", "null"], "format": "uuid"},
        "events": {"type": "array", "items": {"$ref": "#/components/schemas/TimelineEvent"}},
        "truncated": {"type": "boolean"},
    },
    ["user_id", "request_id", "message_id", "events", "truncated"],
)
# Query of GET /v1/timeline: exactly one of three names. OpenAPI cannot tie
# separate query parameters together, so the three form one exploded object
# parameter (the wire form stays ?user_id=...) whose schema says "one of".
TIMELINE_SUBJECTS: dict[str, Schema] = {"user_id": USER_ID, "request_id": UUID, "message_id": UUID}
TIMELINE_QUERY: Schema = {
    "type": "object",
    "oneOf": [_object({name: schema}, [name]) for name, schema in TIMELINE_SUBJECTS.items()],
}
HEALTH = _object({"status": {"const": "ok"}}, ["status"])
READY = _object({"status": {"const": "ready"}, "schema_version": {"type": "integer"}}, ["status", "schema_version"])
PROBLEM: Schema = {
    "type": "object",
    "description": "RFC 9457 problem details; `type` names the problem for programs.",
    "properties": {
        "type": {"type": "string", "format": "uri"},
        "title": {"type": "string"},
        "status": {"type": "integer"},
        "detail": {"type": "string"},
        "retry_at": TIMESTAMP,
        "attempts_left": {"type": "integer", "minimum": 0},
        "errors": {
            "type": "array",
            "items": _object({"pointer": {"type": "string"}, "detail": {"type": "string"}}, ["pointer", "detail"]),
        },
    },
    "required": ["type", "title", "status", "detail"],
}
