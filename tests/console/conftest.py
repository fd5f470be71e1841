from tests.support.browser import browser  # noqa: F401  (the one browser fixture, shared with tests/http)
