"""`projections verify`: a row changed behind a projection's back is reported, and a rebuild mends it."""

from __future__ import annotations

from sqlalchemy import Engine, text

from infra.projector.catchup import catch_up
from infra.clock import ManualClock
from infra.projector.registry import all_projections, projection_named
from infra.projector.rebuild import rebuild
from infra.services.clients import create_client, revoke_client, rotate_client
from domain.tenants import Purpose
from infra.services.tenants import configure_tenant, create_tenant
from infra.services.unit_of_work import ServiceContext
from infra.projector.verify import verify
from infra.services.webhooks import add_endpoint, remove_endpoint, rotate_endpoint
from tests.support.traffic import some_feedback, some_traffic


def test_every_projection_verifies_after_traffic(ctx: ServiceContext, clock: ManualClock, engine: Engine,
                                                 admin_engine: Engine) -> None:
    some_traffic(ctx, clock)
    some_feedback(ctx)  # a bounce and a complaint suppress, an admin lifts one
    create_tenant(ctx, "acme")  # configured, and clients: keys issued, rotated and revoked
    configure_tenant(ctx, "acme", changes={"purposes": (Purpose("login", "sign-in code"),)}, actor="cli:ops",
                     reason="T-1")
    first = create_client(ctx, "shop", tenant="acme", scopes=["send", "metrics"])
    rotate_client(ctx, "shop", tenant="acme")
    revoke_client(ctx, "shop", key_id=first.key_id, tenant="acme")
    hook = add_endpoint(ctx, "acme", "https://hooks.acme.test/authledger", ["otp.verified"])  # added, rotated, removed
    rotate_endpoint(ctx, "acme", hook.endpoint_id)
    remove_endpoint(ctx, "acme", add_endpoint(ctx, "acme", "https://hooks.acme.test/other").endpoint_id)
    catch_up(engine)
    for projection in all_projections():
        report = verify(admin_engine, projection, batch_size=7)
        assert report.ok, [d.describe() for d in report.differences] + report.problems
        assert report.events > 0 or projection.name in ("otp_challenges", "receipts")


def test_verify_reports_a_row_changed_behind_the_outbox_and_passes_after_a_rebuild(
    ctx: ServiceContext, clock: ManualClock, engine: Engine, admin_engine: Engine
) -> None:
    some_traffic(ctx, clock)
    with admin_engine.begin() as connection:
        message_id = connection.execute(text(
            "UPDATE email_outbox SET state = 'pending', attempt_count = 7 "
            "WHERE message_id = (SELECT min(message_id::text)::uuid FROM email_outbox WHERE state = 'sent') "
            "RETURNING message_id"
        )).scalar_one()
        connection.execute(text("DELETE FROM reset_tokens WHERE request_id = "
                                "(SELECT request_id FROM reset_tokens LIMIT 1)"))

    outbox = verify(admin_engine, projection_named("email_outbox"))
    tokens = verify(admin_engine, projection_named("reset_tokens"))

    assert not outbox.ok and outbox.difference_count == 1
    [difference] = outbox.differences
    assert difference.describe() == (
        f"email_outbox [message_id={message_id}]: state: live pending != replay sent; "
        "attempt_count: live 7 != replay 1"
    )
    assert [d.kind for d in tokens.differences] == ["missing"]
    assert "missing from the live table, but a replay of the log has it" in tokens.differences[0].describe()

    rebuild(admin_engine, projection_named("email_outbox"))
    rebuild(admin_engine, projection_named("reset_tokens"))
    assert verify(admin_engine, projection_named("email_outbox")).ok
    assert verify(admin_engine, projection_named("reset_tokens")).ok


def test_verify_catches_a_catch_up_projection_counted_twice(
    ctx: ServiceContext, clock: ManualClock, engine: Engine, admin_engine: Engine
) -> None:
    some_traffic(ctx, clock)
    catch_up(engine)
    with admin_engine.begin() as connection:
        changed = connection.execute(
            text("UPDATE delivery_messages SET attempts = attempts + 1 WHERE outcome = 'sent'"))
        connection.execute(text(
            "UPDATE projection_checkpoints SET events_applied = events_applied + 3 WHERE projection = 'audit_index'"
        ))

    stats = verify(admin_engine, projection_named("delivery_stats"))
    index = verify(admin_engine, projection_named("audit_index"))

    assert stats.difference_count == changed.rowcount > 1 and {d.kind for d in stats.differences} == {"changed"}
    assert all(set(d.columns) == {"attempts"} for d in stats.differences)
    assert index.difference_count == 0 and len(index.problems) == 1
    assert "a batch was applied twice or lost" in index.problems[0]
