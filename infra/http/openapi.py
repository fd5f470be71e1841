"""The OpenAPI 3.1 document served at /openapi.json, built from the schemas the server enforces.

Its operations are described with the pieces of ``infra.http.openapi_operations``.
"""

from __future__ import annotations

from infra.http import schemas
from infra.http.codes import CATALOGUE
from infra.http.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from infra.http.openapi_operations import (
    BAD_BODY,
    BODY_PROBLEMS,
    COMMON_PROBLEMS,
    FAIRNESS_REFUSALS,
    FORBIDDEN,
    KEY_RATE_REFUSAL,
    REQUEST_ID_HEADER,
    WRITE_UNAVAILABLE,
    WWW_AUTHENTICATE,
    Json,
    action_operation,
    admin_operation,
    create_operation,
    json_response,
    link,
    operation,
    problem,
    too_many_requests,
)


RESET_LINKS: Json = {
    "VerifyToken": link("verifyPasswordReset", "Check the token that the queued email carries."),
    "ConsumeToken": link("consumePasswordReset", "Use the token that the queued email carries."),
}
OTP_LINKS: Json = {
    "VerifyCode": link("verifyOtpChallenge", "Check the code that the queued email carries.",
                       {"challenge_id": "$response.body#/challenge_id"}),
}
# A verify with `client_ip` takes one of that IP's checks this hour (domain/send_limits.py).
VERIFY_TOO_MANY = too_many_requests("With `client_ip`: that IP made too many checks within the hour (`rate-limited`; "
                                    f"`RateLimit-Policy` names the limit). Nothing was written. {FAIRNESS_REFUSALS}")
TOKEN_REFUSED = ("A token that can no longer be used is `token-invalid`; its `code` says why (`token_expired`, "
                 "`token_used`, `token_superseded`, `token_invalidated`). An unknown token is `token_unknown`, and so "
                 "is a token of another tenant or of an erased user, word for word.")
CHALLENGE_ID: Json = {
    "name": "challenge_id", "in": "path", "required": True, "schema": schemas.UUID,
    "description": "The challenge_id of the created challenge; anything but a canonical UUID is a 404.",
}
USER_ID: Json = {
    "name": "user_id", "in": "path", "required": True, "schema": schemas.USER_ID,
    "description": "The application's id for the user, in the tenant of the API key; a malformed id is a 404.",
}
TIMELINE_QUERY: Json = {
    "name": "subject", "in": "query", "required": True, "style": "form", "explode": True,
    "schema": schemas.TIMELINE_QUERY,
    "description": "Exactly one of `user_id` (every request, challenge and email of this user), `request_id` "
                   "(one reset request or OTP challenge and its emails) or `message_id` (one email and the "
                   "request it serves), as `?user_id=42`. None, two or an unknown name is a 400 `invalid-query`.",
}

CLIENT_NAME_PARAMETER: Json = {
    "name": "name", "in": "path", "required": True, "schema": schemas.CLIENT_NAME,
    "description": "The client's name. A client of another tenant, or a name no client can have, is a 404.",
}
MESSAGE_ID: Json = {
    "name": "message_id", "in": "path", "required": True, "schema": schemas.UUID,
    "description": "The message to send again. Another tenant's message, or anything but a canonical UUID, "
                   "is a 404.",
}

ENDPOINT_ID: Json = {
    "name": "endpoint_id", "in": "path", "required": True, "schema": {"type": "string"},
    "description": "A webhook endpoint of this key's tenant (ep_ and 32 hex digits); any other is a 404.",
}


ADMIN_PATHS: Json = {
    "/v1/admin/tenant": {
        "get": admin_operation(
            "This key's tenant's settings (null: the deployment's default) and every change to them", "getTenant",
            {"200": json_response("The settings now, with `history`: when, who, why and what changed.",
                                  "TenantSettings")}, not_found=False),
        "patch": admin_operation(
            "Change this key's tenant's settings, with a reason recorded in the log", "configureTenant",
            {"200": json_response("The settings now; `recorded` false when they already were so.",
                                  "TenantSettings")}, body="TenantPatch", not_found=False,
            bad_request="No setting named, or a value its deployment-wide setting's rule refuses: a reset URL "
                        "in http:// to a host other than loopback, a sender or reply-to other than one plain "
                        "address, a sender name with address syntax (quotes, @, <, >), a template with a "
                        "placeholder its email does not have or without its link or code, rules that together "
                        "break one (`invalid-input`). Nothing is written. A change of the reset URL, sender, "
                        "sender name or reply-to is logged at WARNING and counted in "
                        "`authledger_tenant_takeover_changes_total`."),
    },
    "/v1/admin/clients": {
        "get": admin_operation(
            "Every key of this tenant's clients, live or revoked (never a key itself)", "listClients",
            {"200": json_response("The keys, by client.", "ApiKeys")}, not_found=False),
        "post": admin_operation(
            "Create a client of this tenant; its first key is shown this once", "createClient",
            {"201": json_response("Created.", "IssuedKey")}, body="ClientCreate", not_found=False,
            bad_request="A name already taken in this tenant (`invalid-input`).",
            forbidden="asks for a scope it does not hold itself, or for `operator` (granted only by the "
                      "CLI at the server)"),
    },
    "/v1/admin/clients/{name}/rotate": {"post": admin_operation(
        "Issue another key for a client; its other keys stay live until revoked", "rotateClient",
        {"201": json_response("Issued; the key is shown this once.", "IssuedKey")}, parameters=[CLIENT_NAME_PARAMETER],
        writes=True, bad_request="A client with no live key (`invalid-input`).",
        forbidden="the client holds a scope the key does not hold itself, or `operator`")},
    "/v1/admin/clients/{name}/revoke": {"post": admin_operation(
        "Revoke one key (`key_id`) or every key of a client", "revokeClient",
        {"200": json_response("Revoked; `key_ids` empty when they already were.", "KeysRevoked")}, body="KeyRevoke",
        parameters=[CLIENT_NAME_PARAMETER], forbidden="the client holds `operator` (managed only by the CLI)")},
    "/v1/admin/messages/{message_id}/redrive": {"post": admin_operation(
        "Send an abandoned or failed message again, with a reason recorded in the log", "redriveMessage",
        {"200": json_response("Pending again; the worker reads the request fresh and skips it if it expired.",
                              "Redriven")}, body="Redrive", parameters=[MESSAGE_ID],
        bad_request="A message that is not abandoned or failed, or a reason that is blank or holds an "
                    "email address (also percent-encoded or with a look-alike @), control or bidirectional "
                    "control characters (`invalid-input`).")},
    "/v1/admin/webhooks": {
        "get": admin_operation(
            "This tenant's webhook endpoints, removed ones too (never a secret)", "listWebhooks",
            {"200": json_response("The endpoints, oldest first.", "WebhookEndpoints")}, not_found=False),
        "post": admin_operation(
            "Add a webhook endpoint to this tenant; its signing secret is shown this once (docs/webhooks.md)",
            "addWebhook", {"201": json_response("Added.", "WebhookSecret")}, body="WebhookCreate", not_found=False,
            bad_request="A URL that is not https:// (http:// only to the server's own machine), or an unknown "
                        "event type (`invalid-input`)."),
    },
    "/v1/admin/webhooks/{endpoint_id}/rotate": {"post": admin_operation(
        "Give an endpoint a new signing secret; the old one signs beside it for 24 hours", "rotateWebhook",
        {"201": json_response("Rotated; the new secret is shown this once.", "WebhookSecret")},
        parameters=[ENDPOINT_ID], writes=True)},
    "/v1/admin/webhooks/{endpoint_id}/remove": {"post": admin_operation(
        "Stop calling an endpoint; its deliveries not yet made are skipped", "removeWebhook",
        {"200": json_response("Removed.", "WebhookRemoved")}, parameters=[ENDPOINT_ID], writes=True)},
    "/v1/admin/suppressions": {"get": admin_operation(
        "This tenant's suppression list: the users whose address bounced for good or complained (never an "
        "address)", "listSuppressions",
        {"200": json_response("Newest suppression first.", "SuppressionList")}, not_found=False)},
    "/v1/admin/suppressions/lift": {"post": admin_operation(
        "Lift the suppression of an address, with a reason recorded in the log", "liftSuppression",
        {"200": json_response("Lifted: creates to the address are sent again.", "SuppressionsLifted")},
        body="SuppressionLift", writes=True,
        bad_request="A reason that is blank or holds an email address, control or bidirectional control "
                    "characters (`invalid-input`).")},
}
VENDOR_PROBLEMS: Json = {
    "401": problem("The post lacks the provider's proof, or it does not verify, or this deployment has not "
                   "configured the provider (`unauthorized`); nothing is read further or written.", WWW_AUTHENTICATE),
    **BODY_PROBLEMS,
    "500": COMMON_PROBLEMS["500"],
    "503": WRITE_UNAVAILABLE,
}
PROVIDER_PATHS: Json = {
    "/v1/providers/generic/events": {"post": operation(
        "Report what a provider said about an email: delivered, bounced (for good or for now), or a spam "
        "complaint; needs the `provider-events` scope. A permanent bounce or a complaint suppresses the address",
        "reportProviderEvent",
        {"200": json_response("Recorded, or, with `recorded: false`, the same report was recorded before.",
                              "ProviderEventRecorded"),
         "403": problem("The API key lacks the `provider-events` scope (`forbidden`)."),
         "404": problem("No email with that id in the key's tenant (`not-found`); one of another tenant is "
                        "answered the same way. Nothing is written."),
         **COMMON_PROBLEMS, **BODY_PROBLEMS, "503": WRITE_UNAVAILABLE},
        body="ProviderEvent",
        bad_request=f"{BAD_BODY} Neither or both of `message_id` and `provider_message_id`, or a diagnostic "
                    "with control characters (`invalid-input`). Nothing is written.")},
    "/v1/providers/postmark/events": {"post": {**operation(
        "Postmark's bounce, spam complaint and delivery webhooks, authenticated by the basic auth credentials "
        "in the webhook's URL (AUTHLEDGER_POSTMARK_WEBHOOK_AUTH)", "postmarkWebhook",
        {"200": json_response("Recorded (or a repeat, or an event that is no delivery feedback: `ignored`).",
                              "VendorEventsRecorded"),
         "404": problem("The post names no email of this deployment (`not-found`); nothing is written."),
         **VENDOR_PROBLEMS},
        body="PostmarkEvent", bad_request=f"{BAD_BODY} A body that is no Postmark event (`invalid-input`)."),
        "security": [{"postmarkBasic": []}]}},
    "/v1/providers/sendgrid/events": {"post": {**operation(
        "SendGrid's signed Event Webhook (ECDSA P-256 over the timestamp and the body, checked with "
        "AUTHLEDGER_SENDGRID_WEBHOOK_PUBLIC_KEY)", "sendgridWebhook",
        {"200": json_response("Each event recorded on its own; events naming no email of ours are counted "
                              "`unknown`, not refused, so that SendGrid does not post the batch again.",
                              "VendorEventsRecorded"), **VENDOR_PROBLEMS},
        body="SendgridEvents", bad_request=f"{BAD_BODY} A body that is no array of SendGrid events "
                                           "(`invalid-input`)."),
        "security": [{"sendgridSignature": []}]}},
}


# Each code once, with what it means: `oneOf` of constants is how JSON Schema describes the values of an enum.
PROBLEM_CODE: Json = {
    "type": "string",
    "description": "The stable, machine-readable answer of a problem: switch on it, never on `title` or `detail`. "
                   "A code is never renamed; new ones may be added.",
    "oneOf": [{"const": listed.code.name, "description": f"{listed.code.meaning} ({listed.status}, "
                                                          f"`{listed.problem_type}`)"}
              for listed in CATALOGUE],
}


# Support actions on a user of the key's tenant (infra/http/support.py).
SUPPORT_NOT_FOUND = problem("A malformed user id; for a fresh link or code also a user with no request on record "
                            "to take an address from, or whose address was erased (`not-found`). A user of "
                            "another tenant is simply not one of this tenant's: nothing tells it exists.")
SUPPORT_REASON_REFUSED = ("A reason that is blank, over 500 characters, or holds an email address (also "
                          "percent-encoded or with a look-alike @), control or bidirectional control characters "
                          "(`invalid-input`); nothing is written.")


def support_operation(summary: str, operation_id: str, ok: Json, body: str, *, bad_request: str,
                      too_many: str | None = None) -> Json:
    """A support action on a user of the key's tenant: ``admin`` needed, 404 as ``SUPPORT_NOT_FOUND`` says."""
    described = admin_operation(summary, operation_id, ok, body=body, parameters=[USER_ID], bad_request=bad_request)
    described["responses"]["404"] = SUPPORT_NOT_FOUND
    if too_many:
        described["responses"]["429"] = too_many_requests(f"{too_many} {FAIRNESS_REFUSALS}")
    return described


SUPPORT_PATHS: Json = {
    "/v1/users/{user_id}/invalidation": {"post": support_operation(
        "Withdraw a user's open reset links and one-time codes without erasing anything; needs `admin`",
        "invalidateUser",
        {"200": json_response("Withdrawn: a link or code presented from now on is refused as withdrawn by "
                              "support, and an email of theirs still queued is not sent. A user with nothing "
                              "open, known or not, is answered alike with zero counts and nothing written.",
                              "Invalidation")},
        "InvalidationBody", bad_request=SUPPORT_REASON_REFUSED)},
    "/v1/users/{user_id}/resend": {"post": support_operation(
        "Send a user a fresh reset link or one-time code on the application's behalf, to the address of their "
        "latest request; needs `admin`", "resendToUser",
        {"202": json_response("Queued: a new request recorded as made by this key, with the reason; or, within "
                              "the cooldown, the open request (`reused`).", "Resent")},
        "ResendBody",
        bad_request=f"{SUPPORT_REASON_REFUSED} Also a `purpose` with flow `reset`, or a purpose the tenant does "
                    "not declare (`purpose-unknown`).",
        too_many="The user's hourly limit or a limit of the address was met (`rate-limited`), or one-time codes "
                 "are locked for the user (`locked-out`); nothing was written.")},
}


def openapi_document(*, max_body_bytes: int) -> Json:
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "authledger",
            "version": "1",
            "description": "Password-reset links and email one-time codes, every action an event in an "
                           f"append-only log. Request bodies are JSON objects of at most {max_body_bytes} "
                           "bytes; unknown fields are rejected. Errors are RFC 9457 problem details whose "
                           "`type` is `urn:authledger:problem:<name>` and whose `code` (components/schemas/"
                           "ProblemCode) tells a program exactly what happened: switch on `code`.",
        },
        "security": [{"apiKey": []}],
        "paths": {
            "/v1/password-resets": {"post": create_operation(
                "Create a password-reset request and queue its email", "createPasswordReset",
                "PasswordResetCreate", "PasswordResetCreated", links=RESET_LINKS,
                too_many="A limit was reached (`rate-limited`; `RateLimit-Policy` names it): reset emails for "
                         "this user, emails to this address, or, with `client_ip`, what one IP may ask for "
                         "within the hour. Nothing was written.")},
            "/v1/password-resets/verify": {"post": action_operation(
                "Check a reset token without using it", "verifyPasswordReset", "TokenBody",
                "The token is valid: the user may choose a new password.", "PasswordResetValid",
                rejected=TOKEN_REFUSED,
                extra={"429": VERIFY_TOO_MANY})},
            "/v1/password-resets/consume": {"post": action_operation(
                "Use a reset token once; the application then changes the password", "consumePasswordReset",
                "TokenBody", "Consumed: other open requests are superseded and a notice is queued.",
                "PasswordResetConsumed",
                rejected=TOKEN_REFUSED,
                extra={"429": VERIFY_TOO_MANY, "503": WRITE_UNAVAILABLE})},
            "/v1/otp/challenges": {"post": create_operation(
                "Create an OTP challenge and queue the code's email", "createOtpChallenge",
                "OtpChallengeCreate", "OtpChallengeCreated", links=OTP_LINKS,
                refused="A purpose not declared for the key's tenant (`purpose-unknown`).",
                too_many="A limit was reached (`rate-limited`; `RateLimit-Policy` names it): codes for this "
                         "user, emails to this address, or, with `client_ip`, what one IP may ask for within the "
                         "hour; or one-time codes are locked for this user (`locked-out`).")},
            "/v1/otp/challenges/{challenge_id}/verify": {"post": action_operation(
                "Check a code", "verifyOtpChallenge", "CodeBody", "The code is right; it cannot be used again.",
                "OtpVerified", parameters=[CHALLENGE_ID],
                rejected="A wrong, expired, replaced, used or locked code, or an unknown challenge, is "
                         "`code-rejected`, with `attempts_left`; its `code` says which (`code_wrong`, "
                         "`challenge_expired`, `challenge_superseded`, `challenge_used`, `challenge_locked`, "
                         "`challenge_invalidated`, `challenge_unknown`). A challenge of another user, of another "
                         "purpose than the one named, or of another tenant, or of an erased user, is answered "
                         "exactly as an unknown one and counts no attempt. A code with another number of digits than "
                         "the challenge's is `invalid-input` (\"the code must be 6 digits\") and is not "
                         "counted as an attempt.",
                extra={"404": problem("The challenge id is not a canonical UUID (`not-found`)."),
                       "429": too_many_requests(
                           "One-time codes are locked for this user (`locked-out`), or, with `client_ip`, that IP "
                           "made too many checks within the hour (`rate-limited`; nothing was written). "
                           f"{FAIRNESS_REFUSALS}", retry_after_required=False),
                       "503": WRITE_UNAVAILABLE})},
            "/v1/timeline": {"get": operation(
                "The events of a user, a request or a message, for support (exactly one query parameter)",
                "getTimeline",
                {"200": json_response("The events, oldest first; the most recent 500 when `truncated`.", "Timeline"),
                 "404": problem("No such request or message (`not-found`); one of another tenant is "
                                "answered the same way."), **COMMON_PROBLEMS},
                parameters=[TIMELINE_QUERY],
                bad_request="No, two or an unknown query parameter, or a malformed value (`invalid-query`).")},
            **ADMIN_PATHS,
            **PROVIDER_PATHS,
            "/v1/users/{user_id}/erasure": {"post": action_operation(
                "Erase a user's personal data (crypto-shredding); needs the `admin` scope. Irreversible",
                "eraseUser", "ErasureBody",
                "Erased: the user's data keys are destroyed and their addresses read `[erased]` from now on; "
                "or, with `recorded: false`, they already were.", "Erasure", parameters=[USER_ID],
                rejected="A reason that is blank, over 500 characters, or holds an email address (also "
                         "percent-encoded or with a look-alike @ such as the fullwidth one), control or "
                         "bidirectional control characters is `invalid-input`.",
                extra={"403": problem("The API key lacks the `admin` scope (`forbidden`)."),
                       "404": problem("No such user in the key's tenant: no data key and no events "
                                      "(`not-found`)."),
                       "503": WRITE_UNAVAILABLE})},
            **SUPPORT_PATHS,
            "/healthz": {"get": operation(
                "The process is up", "health", {"200": json_response("Up.", "Health")}, secured=False)},
            "/readyz": {"get": {**operation(
                "The database is reachable (without a key); with a `metrics` or `operator` key, also that its "
                "schema is current",
                "ready",
                {"200": json_response("Ready; `schema_version` only for a `metrics` or `operator` key, `roles` (which "
                                       "host runs each once-only role) only for an `operator` key.", "Ready"),
                 "401": COMMON_PROBLEMS["401"], "403": FORBIDDEN, "429": too_many_requests(KEY_RATE_REFUSAL),
                 "503": problem("Not ready (`database-unavailable`; `read-only-standby` when the server "
                                "answers but is a standby in recovery, not ready for writes; with a `metrics` key "
                                "also `schema-mismatch`).")}),
                "security": [{}, {"apiKey": []}]}},
            "/metrics": {"get": operation(
                "Prometheus metrics (scrape with a bearer token): a `metrics` key sees its own tenant's series "
                "only, labelled `tenant`; an `operator` key sees the deployment's", "metrics",
                {"200": {"description": "Prometheus text exposition format 0.0.4.",
                         "headers": {"X-Request-Id": REQUEST_ID_HEADER},
                         "content": {METRICS_CONTENT_TYPE: {"schema": {"type": "string"}}}},
                 "401": COMMON_PROBLEMS["401"], "403": FORBIDDEN, "429": too_many_requests(KEY_RATE_REFUSAL),
                 "500": COMMON_PROBLEMS["500"], "503": COMMON_PROBLEMS["503"]})},
            "/openapi.json": {"get": operation(
                "This document", "openapi",
                {"200": {"description": "OpenAPI 3.1.", "headers": {"X-Request-Id": REQUEST_ID_HEADER},
                         "content": {"application/json": {"schema": {"type": "object"}}}}},
                secured=False)},
        },
        "components": {
            "securitySchemes": {"apiKey": {
                "type": "http", "scheme": "bearer",
                "description": "An API key from `authledger clients create NAME --scope SCOPE`. Each operation "
                               "needs one scope (send, verify, review, admin, metrics or provider-events; "
                               "`operator`, which only the CLI grants, also opens /metrics and /readyz); a key "
                               "without it gets 403 `forbidden`.",
            },
                "postmarkBasic": {"type": "http", "scheme": "basic",
                                  "description": "The user:password set in Postmark's webhook URL."},
                "sendgridSignature": {"type": "apiKey", "in": "header",
                                      "name": "X-Twilio-Email-Event-Webhook-Signature",
                                      "description": "SendGrid's ECDSA signature of the timestamp header's value "
                                                     "and the body."}},
            "schemas": {
                "PasswordResetCreate": schemas.RESET_CREATE,
                "PasswordResetCreated": schemas.RESET_CREATED,
                "TokenBody": schemas.TOKEN_BODY,
                "PasswordResetValid": schemas.RESET_VALID,
                "PasswordResetConsumed": schemas.RESET_CONSUMED,
                "OtpChallengeCreate": schemas.OTP_CREATE,
                "OtpChallengeCreated": schemas.OTP_CREATED,
                "CodeBody": schemas.CODE_BODY,
                "OtpVerified": schemas.OTP_VERIFIED,
                "ErasureBody": schemas.ERASURE_BODY,
                "Erasure": schemas.ERASURE,
                "InvalidationBody": schemas.INVALIDATION_BODY,
                "Invalidation": schemas.INVALIDATION,
                "ResendBody": schemas.RESEND_BODY,
                "Resent": schemas.RESENT,
                "TimelineEvent": schemas.TIMELINE_EVENT,
                "Timeline": schemas.TIMELINE,
                "Health": schemas.HEALTH,
                "Ready": schemas.READY,
                "ClientCreate": schemas.CLIENT_CREATE,
                "KeyRevoke": schemas.KEY_REVOKE,
                "Redrive": schemas.REDRIVE,
                "IssuedKey": schemas.ISSUED_KEY,
                "ApiKey": schemas.API_KEY,
                "ApiKeys": schemas.API_KEYS,
                "KeysRevoked": schemas.KEYS_REVOKED,
                "Redriven": schemas.REDRIVEN,
                "TenantPatch": schemas.TENANT_PATCH,
                "TenantSettings": schemas.TENANT_SETTINGS,
                "ProviderEvent": schemas.PROVIDER_EVENT,
                "ProviderEventRecorded": schemas.PROVIDER_EVENT_RECORDED,
                "PostmarkEvent": schemas.POSTMARK_EVENT,
                "SendgridEvents": schemas.SENDGRID_EVENTS,
                "VendorEventsRecorded": schemas.VENDOR_EVENTS_RECORDED,
                "SuppressionLift": schemas.SUPPRESSION_LIFT,
                "SuppressionsLifted": schemas.SUPPRESSIONS_LIFTED,
                "SuppressionList": schemas.SUPPRESSION_LIST,
                "WebhookCreate": schemas.WEBHOOK_CREATE,
                "WebhookSecret": schemas.WEBHOOK_SECRET,
                "WebhookEndpoint": schemas.WEBHOOK_ENDPOINT,
                "WebhookEndpoints": schemas.WEBHOOK_ENDPOINTS,
                "WebhookRemoved": schemas.WEBHOOK_REMOVED,
                "Problem": schemas.PROBLEM,
                "ProblemCode": PROBLEM_CODE,
            },
        },
    }
