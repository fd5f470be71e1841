"""The HTTP API (issue 5): a Starlette app over the service functions, and `authledger serve`.

``app`` builds the application, ``validation`` and ``schemas`` check what
comes in, ``problems`` turns every error into RFC 9457 problem details,
``openapi`` describes it all, ``clients`` holds the API keys, ``timeline``
and ``metrics`` answer support and operations, ``serve`` runs it with the
delivery workers.
"""
