"""JSON Schemas of what the API accepts and answers: one source for validation and /openapi.json.

Patterns are anchored and restricted to what both ECMA-262 (OpenAPI tools)
and Python's ``re`` read the same way, so the document generators work from
is exactly what the server enforces.
"""

from __future__ import annotations

from typing import Any

from domain.clients import SCOPES
from domain.webhooks import EVENT_TYPES, MAX_URL_LENGTH

Schema = dict[str, Any]

# Printable ASCII without space: what the domain accepts as a new id or key
# (domain.input_checks.check_token), for the command line too.
ASCII_TOKEN = "[!-~]"
USER_ID: Schema = {
    "type": "string", "minLength": 1, "maxLength": 200, "pattern": f"^{ASCII_TOKEN}+$",
    "description": "The application's id for the user: 1-200 printable ASCII characters, no spaces. Looked "
                   "up as given, so that a user created before new ids were refused an @ can still be "
                   "found, verified and erased.",
    "examples": ["42"],
}
# A user id that a create brings into the log, where it names the user's
# records for ever and erasure cannot reach it: never an email address. The
# pattern states the literal @ for the document's readers and generators;
# the domain's one rule (domain.input_checks.user_id_problem) decides, as
# for the CLI, and also refuses an @ hidden by encoding, which no pattern states.
NEW_USER_ID_PATTERN = "^[!-?A-~]+$"  # printable ASCII without space and @ (0x40)
NEW_USER_ID: Schema = {
    "type": "string", "minLength": 1, "maxLength": 200, "pattern": NEW_USER_ID_PATTERN,
    "description": "The application's own id for the user: 1-200 printable ASCII characters, no spaces, and "
                   "never an email address or part of one. It names the user's records in the append-only "
                   "log, where erasure cannot reach it, so an id holding an @ in any form, also once "
                   "percent-decoded (%40, %2540) or HTML-unescaped (&#64;), is refused with 400 "
                   "`user-id-refused` and nothing is written.",
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
    "description": "What the code is for: one of the purposes declared for the key's tenant (`authledger "
                   "tenants configure NAME --purpose NAME=TEXT`; the deployment's AUTHLEDGER_OTP_PURPOSES "
                   "while it declares none). The email names the code by the purpose's declared display text, "
                   "never by this value. An undeclared purpose is refused with 400 `purpose-unknown`.",
}
VERIFY_PURPOSE: Schema = {
    **{k: v for k, v in PURPOSE.items() if k != "default"},
    "description": "When given, the code is accepted only for a challenge issued for this purpose.",
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
# The end user's IP (domain/client_ips.py): dotted IPv4, IPv6 in its plain or
# "::"-compressed hex forms, or an IPv4-mapped "::ffff:a.b.c.d". Each form the
# pattern admits Python's ipaddress reads alike, and the server enforces the
# pattern itself, so the document and the server agree on every string. The
# rarer IPv6 forms with a dotted tail elsewhere, zones and ports are refused.
_OCTET = "(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_IPV4 = rf"{_OCTET}(?:\.{_OCTET}){{3}}"
_HEX = "[0-9A-Fa-f]{1,4}"
_IPV6 = "|".join([
    rf"(?:{_HEX}:){{7}}{_HEX}",
    rf"(?:{_HEX}:){{1,7}}:",
    rf"(?:{_HEX}:){{1,6}}:{_HEX}",
    *(rf"(?:{_HEX}:){{1,{7 - n}}}(?::{_HEX}){{1,{n}}}" for n in range(2, 7)),
    rf":(?:(?::{_HEX}){{1,7}}|:)",
    rf"::[Ff]{{4}}:{_IPV4}",
])
CLIENT_IP_PATTERN = rf"^(?:{_IPV4}|{_IPV6})$"
CLIENT_IP: Schema = {
    "type": "string", "maxLength": 45, "pattern": CLIENT_IP_PATTERN,
    "description": "Optional: the IP address of the end user this call is for, as your application saw it "
                   "(IPv4, or IPv6; no port). When given, the per-IP limits apply, so that calls from one IP "
                   "can never use up a user's or an address's own allowance. Kept only as a keyed hash; an "
                   "IPv6 address counts as its /64.",
    "examples": ["203.0.113.7"],
}

# A Structured Field string (the IETF draft's form, quotes included, no
# escapes) or the bare token most clients send; both name the same key.
IDEMPOTENCY_KEY_PATTERN = r'^(?:"[!#-\[\]-~]{1,255}"|[!-~]{1,255})$'
REQUEST_ID_PATTERN = "^[A-Za-z0-9._:@/+=-]{1,128}$"


def _object(properties: dict[str, Schema], required: list[str]) -> Schema:
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


# Why an admin erases a user: recorded in the erasure event, in clear, so it must name no address.
REASON: Schema = {
    "type": "string", "minLength": 1, "maxLength": 500,
    "description": "Why, for the record: a ticket or request reference. One line, no email address in any "
                   "form (it stays in the log in clear) and no bidirectional control characters.",
    "examples": ["GDPR request 2024-117"],
}

# Request bodies.
RESET_CREATE = _object({"user_id": NEW_USER_ID, "email": EMAIL, "client_ip": CLIENT_IP}, ["user_id", "email"])
TOKEN_BODY = _object({"token": TOKEN, "client_ip": CLIENT_IP}, ["token"])
OTP_CREATE = _object({"user_id": NEW_USER_ID, "email": EMAIL, "purpose": PURPOSE, "client_ip": CLIENT_IP},
                     ["user_id", "email"])
# The user (and, when the application asked for one, the purpose) the code
# must have been issued to: a challenge id alone could be the attacker's own.
CODE_BODY = _object({"code": CODE, "user_id": USER_ID, "purpose": VERIFY_PURPOSE, "client_ip": CLIENT_IP},
                    ["code", "user_id"])
ERASURE_BODY = _object({"reason": REASON}, ["reason"])

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
ERASURE = _object(
    {
        "user_id": {"type": "string"},
        "erased_at": TIMESTAMP,
        "key_ids": {"type": "array", "items": {"type": "string"},
                    "description": "The data keys destroyed now; empty when none was left."},
        "recorded": {"type": "boolean",
                     "description": "False when the user was already erased and nothing was left to destroy: "
                                    "nothing changed, and `erased_at` and `reason` are the earlier erasure's."},
        "reason": {"type": ["string", "null"]},
    },
    ["user_id", "erased_at", "key_ids", "recorded", "reason"],
)
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
READY = _object(
    {"status": {"const": "ready"},
     "schema_version": {"type": "integer", "description": "Only for a key with the `metrics` scope."}},
    ["status"],
)

# Admin: clients and their keys, re-drive. Names as `authledger clients create` takes them.
CLIENT_NAME: Schema = {
    "type": "string", "minLength": 1, "maxLength": 63, "pattern": "^[a-z0-9][a-z0-9._-]{0,62}$",
    "description": "1-63 of a-z, 0-9, '.', '_' and '-', starting with a letter or digit.", "examples": ["shop"],
}
SCOPE: Schema = {"type": "string", "enum": list(SCOPES)}
KEY_ID: Schema = {
    "type": "string", "minLength": 1, "maxLength": 200, "pattern": f"^{ASCII_TOKEN}+$",
    "description": "A key's id, as the list of clients shows it.",
}
CLIENT_CREATE = _object(
    {"name": CLIENT_NAME,
     "scopes": {"type": "array", "items": SCOPE, "minItems": 1, "maxItems": len(SCOPES), "uniqueItems": True,
                "description": "What the client's keys may do."}},
    ["name", "scopes"],
)
KEY_REVOKE = _object({"key_id": KEY_ID}, [])
REDRIVE = _object(
    {"reason": {"type": "string", "minLength": 1, "maxLength": 500,
                "description": "Why the message is sent again; recorded in the log (no email address)."}},
    ["reason"],
)
SCOPE_LIST: Schema = {"type": "array", "items": SCOPE}
ISSUED_KEY = _object(
    {"name": {"type": "string"}, "tenant": {"type": "string"}, "scopes": SCOPE_LIST, "key_id": {"type": "string"},
     "api_key": {"type": "string", "description": "The key, shown this once: only its SHA-256 is kept."}},
    ["name", "tenant", "scopes", "key_id", "api_key"],
)
API_KEY = _object(
    {"key_id": {"type": "string"}, "client": {"type": "string"}, "tenant": {"type": "string"},
     "scopes": SCOPE_LIST, "status": {"enum": ["active", "revoked"]}, "created_at": TIMESTAMP,
     "revoked_at": {"type": ["string", "null"], "format": "date-time"}},
    ["key_id", "client", "tenant", "scopes", "status", "created_at", "revoked_at"],
)
API_KEYS = _object({"keys": {"type": "array", "items": {"$ref": "#/components/schemas/ApiKey"}}}, ["keys"])
KEYS_REVOKED = _object(
    {"name": {"type": "string"}, "revoked": {"type": "boolean"},
     "key_ids": {"type": "array", "items": {"type": "string"}, "description": "The keys revoked by this call."}},
    ["name", "revoked", "key_ids"],
)
REDRIVEN = _object(
    {"message_id": UUID, "redriven": {"const": True}, "state": {"const": "pending"}},
    ["message_id", "redriven", "state"],
)
WEBHOOK_EVENT_TYPES: Schema = {
    "type": "array", "items": {"enum": list(EVENT_TYPES)}, "maxItems": len(EVENT_TYPES), "uniqueItems": True,
    "description": "The event types the endpoint hears; every type when empty or left out.",
}
WEBHOOK_CREATE = _object(
    {"url": {"type": "string", "minLength": 1, "maxLength": MAX_URL_LENGTH,
             "description": "Where to POST: https://, or http:// to the server's own machine only.",
             "examples": ["https://app.example/hooks/authledger"]},
     "event_types": WEBHOOK_EVENT_TYPES},
    ["url"],
)
WEBHOOK_SECRET = _object(
    {"endpoint_id": {"type": "string"}, "tenant": {"type": "string"}, "url": {"type": "string"},
     "event_types": WEBHOOK_EVENT_TYPES,
     "secret": {"type": "string", "description": "whsec_...: the signing secret, shown this once; kept only "
                                                 "sealed."}},
    ["endpoint_id", "tenant", "url", "event_types", "secret"],
)
WEBHOOK_ENDPOINT = _object(
    {"endpoint_id": {"type": "string"}, "tenant": {"type": "string"}, "url": {"type": "string"},
     "event_types": WEBHOOK_EVENT_TYPES, "status": {"enum": ["active", "removed"]}, "created_at": TIMESTAMP,
     "secret_id": {"type": "string", "description": "Names the newest secret (never the secret)."},
     "previous_secret_until": {"type": ["string", "null"], "format": "date-time",
                               "description": "Until when the secret before the last rotation signs too."},
     "removed_at": {"type": ["string", "null"], "format": "date-time"}},
    ["endpoint_id", "tenant", "url", "event_types", "status", "created_at", "secret_id", "previous_secret_until",
     "removed_at"],
)
WEBHOOK_ENDPOINTS = _object(
    {"endpoints": {"type": "array", "items": {"$ref": "#/components/schemas/WebhookEndpoint"}}}, ["endpoints"])
WEBHOOK_REMOVED = _object(
    {"endpoint_id": {"type": "string"}, "status": {"const": "removed"}}, ["endpoint_id", "status"])
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
