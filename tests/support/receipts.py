"""Looking up idempotency receipts in the ``receipts`` projection: what a key named, without loading a stream.

The answer to a replayed request is decided on the user's stream (see
``infra.services.unit_of_work``); the tests use this lookup to check what the
receipts projection holds for a key.
"""

from __future__ import annotations

from sqlalchemy import Engine, select

from infra.db import tables
from projections.receipts import ReceiptRow, receipt_id


def find_receipt(
    engine: Engine, *, flow: str, client: str | None, user_id: str, idempotency_key: str
) -> ReceiptRow | None:
    """The receipt of ``idempotency_key`` for this client, flow and user, if any.

    Rows are kept for good; whether a key still replays (24 h by default) is
    the domain's rule, applied when the request is decided.
    """
    row_id = receipt_id(flow, client, user_id, idempotency_key)
    query = select(tables.receipts).where(tables.receipts.c.receipt_id == row_id)
    with engine.connect() as connection:
        row = connection.execute(query).first()
    return ReceiptRow(**row._mapping) if row is not None else None
