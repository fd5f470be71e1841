"""The HTTP API (issue 5): a Starlette app over the service functions, and `authledger serve`.

``app`` builds the application from the handlers (``api``, ``admin``,
``pages``) inside ``request_context`` (request ids, log lines, the last 500);
``validation`` and ``schemas`` check what comes in, ``problems`` turns every
error into RFC 9457 problem details, ``openapi`` (with the pieces of
``openapi_operations``) describes it all, ``metrics`` answers operations,
``serve`` runs it with the delivery workers.
"""
