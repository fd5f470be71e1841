"""The stable tag and schema version of every event class.

Tags are names chosen once and kept forever: stored data must not depend on
where a class lives in the code. Changing an event's shape means bumping its
version here and registering an upcaster in ``infra.eventlog.upcasters``.
"""

from __future__ import annotations

from domain import counting, email, otp_events, privacy, request_rules, reset_events
from domain import clients, outage, suppression, tenants, webhooks

# tag -> (class, current schema version)
EVENT_TYPES: dict[str, tuple[type, int]] = {
    "ResetRequested": (reset_events.ResetRequested, 2),  # 2: the token's derivation and its sealed nonce
    "ResetSuperseded": (reset_events.ResetSuperseded, 1),
    "ResetRequestRefused": (reset_events.ResetRequestRefused, 1),
    "ResetCompleted": (reset_events.ResetCompleted, 1),
    "ResetTokenRejected": (reset_events.ResetTokenRejected, 1),
    "ResetInvalidated": (reset_events.ResetInvalidated, 1),
    "OtpChallengeIssued": (otp_events.OtpChallengeIssued, 3),  # 2: records the code's digits; 3: derivation, nonce
    "OtpChallengeSuperseded": (otp_events.OtpChallengeSuperseded, 1),
    "OtpVerificationFailed": (otp_events.OtpVerificationFailed, 1),
    "OtpChallengeVerified": (otp_events.OtpChallengeVerified, 1),
    "OtpChallengeLockedOut": (otp_events.OtpChallengeLockedOut, 1),
    "OtpRequestRefused": (otp_events.OtpRequestRefused, 1),
    "OtpCodeRejected": (otp_events.OtpCodeRejected, 1),
    "OtpChallengeInvalidated": (otp_events.OtpChallengeInvalidated, 1),
    "IdempotencyKeyBound": (request_rules.IdempotencyKeyBound, 1),
    "RequestsCounted": (counting.RequestsCounted, 1),
    "EmailQueued": (email.EmailQueued, 1),
    "LeaseClaimed": (email.LeaseClaimed, 1),
    "LeaseExpired": (email.LeaseExpired, 1),
    "LeaseReleased": (email.LeaseReleased, 1),
    "SendAttemptFailed": (email.SendAttemptFailed, 1),
    "ProviderAccepted": (email.ProviderAccepted, 1),
    "DeliverySkipped": (email.DeliverySkipped, 1),
    "DeliveryAbandoned": (email.DeliveryAbandoned, 1),
    "DeliveryRedriven": (email.DeliveryRedriven, 1),
    "DeliveryOutcomeUnknown": (email.DeliveryOutcomeUnknown, 1),
    "ProviderDelivered": (email.ProviderDelivered, 1),
    "ProviderBounced": (email.ProviderBounced, 1),
    "ProviderComplained": (email.ProviderComplained, 1),
    "AddressSuppressed": (suppression.AddressSuppressed, 1),
    "SuppressionLifted": (suppression.SuppressionLifted, 1),
    "ProviderOutageBegan": (outage.ProviderOutageBegan, 1),
    "ProviderOutageEnded": (outage.ProviderOutageEnded, 1),
    "ClientRegistered": (clients.ClientRegistered, 1),
    "ClientRevoked": (clients.ClientRevoked, 1),
    "ClientKeyIssued": (clients.ClientKeyIssued, 1),
    "ClientKeyRevoked": (clients.ClientKeyRevoked, 1),
    "TenantCreated": (tenants.TenantCreated, 1),
    "TenantConfigured": (tenants.TenantConfigured, 2),
    "SubjectErased": (privacy.SubjectErased, 2),  # 2: records the reason
    "DataKeysRewrapped": (privacy.DataKeysRewrapped, 1),
    "WebhookEndpointAdded": (webhooks.WebhookEndpointAdded, 1),
    "WebhookSecretRotated": (webhooks.WebhookSecretRotated, 1),
    "WebhookEndpointRemoved": (webhooks.WebhookEndpointRemoved, 1),
    "WebhookQueued": (webhooks.WebhookQueued, 1),
}

# Personal data, encrypted under the data key of the event's ``user_id`` so
# that `authledger privacy forget` can erase it (infra/eventlog/personal_data.py).
# tag -> fields. A new event with an address (or a client IP) belongs here;
# tests/eventlog/test_personal_fields.py fails for a field named like one that is missing.
# The nonce is no address, but sealing it the same way is what lets erasure
# kill a user's outstanding links and codes (domain/tokens.py, derivation 2).
PERSONAL_FIELDS: dict[str, tuple[str, ...]] = {
    # address_hmac: the keyed hash reviewers search by address; sealed too, so
    # that an erased user can no longer be found by their address.
    "ResetRequested": ("recipient", "address_hmac", "nonce"),
    "OtpChallengeIssued": ("recipient", "address_hmac", "nonce"),
    "EmailQueued": ("recipient",),
    # A bounce's diagnostic usually repeats the address ("550 5.1.1 <ada@example.com>: no such user").
    "ProviderBounced": ("diagnostic",),
    # The suppression list's hashes: erased with the user, as the address index's are.
    "AddressSuppressed": ("address_hmac",),
    "SuppressionLifted": ("address_hmac",),
}
