"""The composition root: builds real adapters from settings, once, lazily.

The CLI and the HTTP app hold one ``App``; tests build theirs with a test
database and other adapters passed in.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from sqlalchemy import Engine

from infra.config import Settings, load_settings
from infra.database import Database


class App:
    """Settings plus the adapters built from them, created on first use."""

    def __init__(self, settings: Settings, *, database: Database | None = None, pool_size: int = 5) -> None:
        self.settings = settings
        self._database = database
        self._pool_size = pool_size

    @classmethod
    def from_environment(cls, environ: Mapping[str, str], overrides: Mapping[str, Any] | None = None) -> App:
        return cls(load_settings(environ, overrides))

    @property
    def database(self) -> Database:
        if self._database is None:
            self._database = Database.locate(self.settings.database_url, self.settings.data_dir)
        return self._database

    @functools.cached_property
    def engine(self) -> Engine:
        return self.database.engine(pool_size=self._pool_size)

    @functools.cached_property
    def admin_engine(self) -> Engine:
        return self.database.admin_engine()

    def close(self) -> None:
        for name in ("engine", "admin_engine"):
            if name in self.__dict__:
                self.__dict__.pop(name).dispose()
