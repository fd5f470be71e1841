"""A presented reset link finds its request through a hash index on the token's hash, not a unique b-tree.

The b-tree of random hex hashes made each new request's insert land on a
random page: on a log of 2.5M reset requests, a page read and a full-page
image about every time (bench/RESULTS.md, "Reset create on the large log").
"""

from __future__ import annotations

from sqlalchemy import Engine, text

from domain.reset import RequestReset
from domain.tokens import hash_token
from infra.db.schema import init_schema
from infra.services.reset import USER_OF_TOKEN, consume_token, request_reset
from infra.services.unit_of_work import ServiceContext
from tests.support.secrets import reset_token_of

TOKEN_HASH_INDEXES = text("""
    SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'reset_tokens' AND indexdef LIKE '%(token_hash)%'
""")


def test_a_presented_links_lookup_uses_the_hash_index(ctx: ServiceContext, admin_engine: Engine) -> None:
    outcome = request_reset(ctx, RequestReset("u1", "ada@example.test"))
    token = reset_token_of(ctx.engine, ctx.keys, outcome.request_id)
    with admin_engine.connect() as connection:
        connection.execute(text("SET enable_seqscan = off"))  # a table this small would be scanned otherwise
        lookup = USER_OF_TOKEN.params(token_hash=hash_token(token)).compile(
            connection, compile_kwargs={"literal_binds": True})
        plan = connection.execute(text(f"EXPLAIN {lookup}")).scalars().all()
    assert any("reset_tokens_by_token_hash" in line for line in plan), plan
    assert consume_token(ctx, token).request_id == outcome.request_id


def test_db_init_replaces_the_unique_b_tree_of_an_older_database(admin_engine: Engine) -> None:
    with admin_engine.begin() as connection:  # as schema.sql made the table before
        connection.execute(text("DROP INDEX reset_tokens_by_token_hash"))
        connection.execute(text("ALTER TABLE reset_tokens ADD CONSTRAINT reset_tokens_token_hash_key "
                                "UNIQUE (token_hash)"))

    init_schema(admin_engine)

    with admin_engine.connect() as connection:
        indexes = dict(connection.execute(TOKEN_HASH_INDEXES).all())
    assert list(indexes) == ["reset_tokens_by_token_hash"]
    assert "USING hash" in indexes["reset_tokens_by_token_hash"]
