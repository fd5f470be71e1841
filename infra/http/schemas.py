"""JSON Schemas of what the API accepts and answers: one source for validation and /openapi.json.

Patterns are anchored and restricted to what both ECMA-262 (OpenAPI tools)
and Python's ``re`` read the same way, so the document generators work from
is exactly what the server enforces.
"""

from __future__ import annotations

from typing import Any

from domain.branding import SHIPPED_LOCALES
from domain.clients import SCOPES
from domain.policy import POLICY_OVERRIDES
from domain.templates import FILES as TEMPLATE_FILES
from domain.locales import LOCALE_PATTERN, MAX_LOCALE
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
# The domain's own pattern (domain/locales.py), so the document and the server agree on every string.
LOCALE: Schema = {
    "type": "string", "minLength": 2, "maxLength": MAX_LOCALE, "pattern": LOCALE_PATTERN,
    "description": "Optional: the end user's language, a BCP 47 tag (`de`, `de-AT`, `pt-BR`). The email is "
                   "written in the best match of this tag, the tenant's default language and English: `de-AT` "
                   "is served by `de`, a language nobody translated falls back, never fails. Sent as the "
                   "email's `Content-Language`.",
    "examples": ["de"],
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
RESET_CREATE = _object({"user_id": NEW_USER_ID, "email": EMAIL, "client_ip": CLIENT_IP, "locale": LOCALE},
                       ["user_id", "email"])
TOKEN_BODY = _object({"token": TOKEN, "client_ip": CLIENT_IP}, ["token"])
OTP_CREATE = _object({"user_id": NEW_USER_ID, "email": EMAIL, "purpose": PURPOSE, "client_ip": CLIENT_IP,
                      "locale": LOCALE}, ["user_id", "email"])
# The user (and, when the application asked for one, the purpose) the code
# must have been issued to: a challenge id alone could be the attacker's own.
CODE_BODY = _object({"code": CODE, "user_id": USER_ID, "purpose": VERIFY_PURPOSE, "client_ip": CLIENT_IP},
                    ["code", "user_id"])
ERASURE_BODY = _object({"reason": REASON}, ["reason"])

# Responses.
REUSED: Schema = {
    "type": "boolean",
    "description": "True when a repeat within the cooldown was answered with the open request made before. "
                   "A replay of an Idempotency-Key answers exactly as the first call did, this field too; only "
                   "the `Idempotency-Replayed` header marks it.",
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
# Support actions on a user (infra/services/support.py): the reason is recorded in the log in clear.
INVALIDATION_BODY = _object({"reason": REASON}, ["reason"])
RESEND_BODY = _object(
    {"flow": {"enum": ["reset", "otp"], "description": "A reset link (`reset`) or a one-time code (`otp`)."},
     "purpose": {**PURPOSE, "description": "For `otp` only: " + PURPOSE["description"]},
     "reason": REASON},
    ["flow", "reason"],
)
_IDS: Schema = {"type": "array", "items": UUID}
INVALIDATION = _object(
    {"user_id": {"type": "string"},
     "invalidated_links": {"type": "integer", "minimum": 0,
                           "description": "Open reset links withdrawn now; 0 for a user with none open, known "
                                          "or not."},
     "invalidated_codes": {"type": "integer", "minimum": 0, "description": "Open one-time codes withdrawn now."},
     "request_ids": _IDS, "challenge_ids": _IDS},
    ["user_id", "invalidated_links", "invalidated_codes", "request_ids", "challenge_ids"],
)
RESENT = _object(
    {"user_id": {"type": "string"}, "flow": {"enum": ["reset", "otp"]},
     "request_id": {**UUID, "description": "The reset request (flow `reset`)."},
     "challenge_id": {**UUID, "description": "The OTP challenge (flow `otp`)."},
     "message_id": UUID, "expires_at": TIMESTAMP, "reused": REUSED},
    ["user_id", "flow", "message_id", "expires_at", "reused"],
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
        # Only when read from the read replica (AUTHLEDGER_READ_DATABASE_URL): how far behind the primary it was.
        "replica": _object({"in_recovery": {"type": "boolean"},
                            "seconds_behind": {"type": ["number", "null"]}},
                           ["in_recovery", "seconds_behind"]),
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
     "schema_version": {"type": "integer", "description": "Only for a key with the `metrics` scope."},
     "roles": {"type": "object", "description": "Only for an `operator` key: which host runs each role that runs "
                                                "once per deployment (`catch-up`, `closed-counts`), null for none.",
               "additionalProperties": {"type": ["string", "null"]}}},
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
# Admin: the key's own tenant's settings (domain.tenants). Each field is checked by the rule of the
# deployment-wide setting it stands in for, which no JSON Schema states whole (an https URL except to
# loopback, one plain address, a display name without address syntax, template placeholders): the
# document gives the shape and says the rest in words; a value the rule refuses is a 400 `invalid-input`.
# null gives a setting back to the deployment's default.
def _nullable(schema: Schema) -> Schema:
    kind = schema.get("type", "string")
    return {**schema, "type": [kind, "null"]}


_SETTING_TEXT: dict[str, Schema] = {
    "reset_url": {"maxLength": 2000, "description": "The page its reset links open, `?token=` added: https://; "
                                                    "http:// only to localhost or a loopback address."},
    "sender": {"maxLength": 254, "description": "The From address of its emails: one plain address."},
    "sender_name": {"maxLength": 64, "description": "The From line's display name: no quotes, @, <, >, commas "
                                                    "or brackets."},
    "reply_to": {"maxLength": 254, "description": "Where replies go (Reply-To): one plain address."},
    "product_name": {"maxLength": 60, "description": "What its emails call the application ($product_name)."},
    "support_contact": {"maxLength": 2000, "description": "Where its users get help ($support_contact): one "
                                                          "plain address or an https:// page."},
}
TENANT_PURPOSE = _object(
    {"name": {"type": "string", "minLength": 1, "maxLength": 64, "pattern": "^[A-Za-z0-9_.:-]+$"},
     "text": {"type": "string", "minLength": 1, "maxLength": 60,
              "description": "What its emails call the code: a short line, no address or link."}},
    ["name", "text"],
)
TEMPLATE_OVERRIDE = _object(
    {"locale": {"type": "string", "enum": list(SHIPPED_LOCALES)},
     "file": {"type": "string", "enum": sorted(TEMPLATE_FILES)},
     "text": {"type": "string", "minLength": 1, "maxLength": 8000,
              "description": "The template (`$name` placeholders of that email, $product_name and "
                             "$support_contact; a body carries the link or code)."}},
    ["locale", "file", "text"],
)
TENANT_SETTINGS_FIELDS: dict[str, Schema] = {
    **{name: _nullable({"type": "string", **schema}) for name, schema in _SETTING_TEXT.items()},
    "default_locale": {"type": ["string", "null"], "enum": [*SHIPPED_LOCALES, None],
                       "description": "The language of its emails."},
    "purposes": {"type": ["array", "null"], "items": TENANT_PURPOSE, "maxItems": 20,
                 "description": "The OTP purposes it allows, replacing its list whole; [] or null for the "
                                "deployment's."},
    "templates": {"type": ["array", "null"], "items": TEMPLATE_OVERRIDE, "maxItems": 18,
                  "description": "Template files replacing the deployment's, per locale; the set replaces its "
                                 "whole; null for none."},
    **{name: {"type": ["integer", "null"], "minimum": o.bounds.low, "maximum": o.bounds.high,
              "description": f"{o.doc} Within what AUTHLEDGER_{name.upper()} accepts."}
       for name, o in POLICY_OVERRIDES.items()},
}
TENANT_PATCH = _object(
    {**TENANT_SETTINGS_FIELDS,
     "reason": {"type": "string", "minLength": 1, "maxLength": 500,
                "description": "Why, recorded in the log in clear (no email address)."}},
    ["reason"],
)
_SETTING_CHANGE = {"type": "object", "required": ["version", "configured_at", "actor", "reason", "changes",
                                                  "takeover"],
                   "properties": {"version": {"type": "integer"}, "configured_at": TIMESTAMP,
                                  "actor": {"type": "string"}, "reason": {"type": "string"},
                                  "changes": {"type": "object", "description": "Setting -> {from, to}."},
                                  "takeover": {"type": "boolean", "description": "It changed where links or mail "
                                                                                 "go (reset URL, sender, reply-to)."}}}
TENANT_SETTINGS: Schema = {
    "type": "object",
    "description": "A tenant's settings now; null is the deployment's default.",
    "properties": {
        "name": {"type": "string"}, "version": {"type": "integer", "minimum": 0},
        "configured_at": {"type": ["string", "null"], "format": "date-time"},
        **{name: _nullable({"type": "string"}) for name in _SETTING_TEXT},
        "default_locale": {"type": ["string", "null"]},
        **{name: {"type": ["integer", "null"]} for name in POLICY_OVERRIDES},
        "templates": {"type": "object", "description": "Locale -> file -> text.",
                      "additionalProperties": {"type": "object", "additionalProperties": {"type": "string"}}},
        "purposes": {"type": "object", "description": "The purposes it allows now: name -> display text.",
                     "additionalProperties": {"type": "string"}},
        "purposes_from": {"enum": ["tenant", "deployment"]},
        "history": {"type": "array", "items": _SETTING_CHANGE},
        "recorded": {"type": "boolean", "description": "Whether this call changed anything."},
        "changed": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["name", "version", "configured_at", *_SETTING_TEXT, "default_locale", *POLICY_OVERRIDES,
                 "templates", "purposes", "purposes_from"],
    "additionalProperties": False,
}


PROVIDER_EVENT = {
    "type": "object",
    "properties": {
        "message_id": {**UUID, "description": "authledger's id of the email (the create's `message_id`)."},
        "provider_message_id": {"type": "string", "minLength": 1, "maxLength": 255, "pattern": f"^{ASCII_TOKEN}+$",
                                "description": "The id the provider answered when it accepted the email."},
        "type": {"type": "string", "enum": ["delivered", "bounce", "complaint"],
                 "description": "What the provider reports: handed to the recipient's server, refused by it, or "
                                "marked as spam by the recipient."},
        "permanent": {"type": "boolean", "default": False,
                      "description": "A bounce's: true when the address will never take mail (an SMTP 5.x.x "
                                     "status); a permanent bounce suppresses the address, a transient one does "
                                     "not. Ignored for other types."},
        "diagnostic": {"type": "string", "maxLength": 1000, "default": "",
                       "description": "The receiving server's words, e.g. `550 5.1.1 user unknown`, kept on one "
                                      "line (unprintable characters read as spaces). Stored sealed under the user's "
                                      "data key (it often repeats the address)."},
    },
    "required": ["type"],
    "additionalProperties": False,
    "oneOf": [{"required": ["message_id"]}, {"required": ["provider_message_id"]}],
    "description": "Name the email by exactly one of `message_id` or `provider_message_id`.",
}
PROVIDER_EVENT_RECORDED = _object(
    {"message_id": UUID, "recorded": {"type": "boolean", "description": "False: the same report was recorded "
                                      "before (providers retry), and nothing was written now."},
     "suppressed": {"type": "boolean", "description": "The address was put on the tenant's suppression list now."}},
    ["message_id", "recorded", "suppressed"])
VENDOR_EVENTS_RECORDED = _object(
    {"recorded": {"type": "integer", "minimum": 0}, "repeated": {"type": "integer", "minimum": 0},
     "unknown": {"type": "integer", "minimum": 0}, "ignored": {"type": "integer", "minimum": 0}},
    ["recorded", "repeated", "unknown", "ignored"])
POSTMARK_EVENT: Schema = {"type": "object", "description": "One Postmark Bounce, SpamComplaint or Delivery webhook "
                                                          "post, as Postmark sends it."}
SENDGRID_EVENTS: Schema = {"type": "array", "items": {"type": "object"},
                           "description": "A SendGrid Event Webhook post: an array of events, as SendGrid signs it."}
SUPPRESSION_LIFT = _object({"email": EMAIL, "reason": REASON}, ["email", "reason"])
SUPPRESSIONS_LIFTED = _object({"lifted": {"type": "integer", "minimum": 1}}, ["lifted"])
SUPPRESSION_LIST = _object({"suppressions": {"type": "array", "items": _object({
    "user_id": USER_ID, "addresses": {"type": "integer", "minimum": 1},
    "reason": {"type": "string", "enum": ["bounce", "complaint"]}, "message_id": UUID, "suppressed_at": TIMESTAMP,
}, ["user_id", "addresses", "reason", "message_id", "suppressed_at"])}}, ["suppressions"])
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
    "description": "RFC 9457 problem details; `code` names the answer for programs (switch on it), `type` the "
                   "problem's kind.",
    "properties": {
        "type": {"type": "string", "format": "uri"},
        "title": {"type": "string"},
        "status": {"type": "integer"},
        "detail": {"type": "string"},
        "code": {"$ref": "#/components/schemas/ProblemCode"},
        "retry_at": TIMESTAMP,
        "attempts_left": {"type": "integer", "minimum": 0},
        "retry": {"type": "string", "description": "On a temporary failure of a request with an Idempotency-Key: "
                                                   "retrying with the same key is safe."},
        "errors": {
            "type": "array",
            "items": _object({"pointer": {"type": "string"}, "detail": {"type": "string"}}, ["pointer", "detail"]),
        },
    },
    "required": ["type", "title", "status", "detail", "code"],
}
