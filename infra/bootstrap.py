"""The composition root: builds real adapters from settings, once, lazily.

The CLI and the HTTP app hold one ``App``; tests build theirs with a test
database and other adapters passed in.
"""

from __future__ import annotations

import functools
import signal
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from infra.clock import SystemClock
from infra.config.settings import Settings, load_settings, policy

# The adapters (SQLAlchemy, the providers' clients, the services) are
# imported where they are first built, not here: every CLI command imports
# this module, and `authledger config show` should not pay for a database
# driver it never opens.
if TYPE_CHECKING:
    from sqlalchemy import Engine

    from infra.db.engine import Database
    from infra.delivery.providers import Mailer
    from infra.eventlog.subject_keys import MasterKeys
    from infra.services.unit_of_work import ServiceContext


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
            from infra.db.engine import Database

            self._database = Database.locate(self.settings.database_url, self.settings.data_dir)
        return self._database

    def check_keys(self, *, announce: bool = True) -> None:
        """Load the token and master keys now, so a long-running process refuses to start without them;
        ``announce``: say so when they are development keys (``serve``'s API processes leave it to ``serve``)."""
        from infra.keys import warn_if_development_keys

        self.services  # noqa: B018 - token keys load with the service context
        self.master_keys  # noqa: B018
        if announce:
            warn_if_development_keys(self.settings)

    def reserve_connections(self, threads: int) -> None:
        """Size the pool for ``threads`` delivery threads, each of which holds a connection per message."""
        if "engine" in self.__dict__:
            raise RuntimeError("reserve connections before the engine is first used")
        self._pool_size = max(self._pool_size, threads + 2)

    @functools.cached_property
    def engine(self) -> Engine:
        from infra.eventlog.subject_keys import bind_master_keys

        return bind_master_keys(self.database.engine(pool_size=self._pool_size), lambda: self.master_keys)

    @functools.cached_property
    def replica_engine(self) -> Engine | None:
        """The read replica's pool (AUTHLEDGER_READ_DATABASE_URL), or None when reading work goes to the primary.
        Marked, so that each answer read through it says how far behind the primary it was."""
        url = self.settings.read_database_url
        if url is None:
            return None
        from infra.db.engine import Database
        from infra.db.replica import on_replica
        from infra.eventlog.subject_keys import bind_master_keys

        replica = Database.locate(url, self.settings.data_dir)  # a URL: never the embedded server
        return on_replica(bind_master_keys(replica.engine(pool_size=self._pool_size), lambda: self.master_keys))

    @property
    def read_engine(self) -> Engine:
        """Where reading work goes (history, explain, audit verify): the replica if one is set, else ``engine``."""
        return self.replica_engine if self.replica_engine is not None else self.engine

    @functools.cached_property
    def outcomes_engine(self) -> Engine:
        """A pool of its own for the delivery worker's outcomes (``infra.delivery.worker.Worker``): one
        recording at a time, and a spare."""
        from infra.eventlog.subject_keys import bind_master_keys

        return bind_master_keys(self.database.engine(pool_size=2), lambda: self.master_keys)

    @functools.cached_property
    def admin_engine(self) -> Engine:
        from infra.eventlog.subject_keys import bind_master_keys

        return bind_master_keys(self.database.admin_engine(), lambda: self.master_keys)

    @functools.cached_property
    def master_keys(self) -> MasterKeys:
        """Loaded when personal data is first sealed or opened: other commands run without one."""
        from infra.keys import load_master_keys

        return load_master_keys(self.settings)

    clock = SystemClock()

    @functools.cached_property
    def services(self) -> ServiceContext:
        from domain.delivery import DeliveryPolicy
        from domain.fairness import FairnessPolicy
        from domain.policy import OtpPolicy, ResetPolicy
        from domain.tenants import parse_purpose_list
        from domain.send_limits import SendLimits
        from infra.emails.templates import load_templates
        from infra.keys import load_token_keys
        from infra.services.unit_of_work import ServiceContext

        s = self.settings
        return ServiceContext(
            engine=self.engine,
            replica_engine=self.replica_engine,
            clock=self.clock,
            keys=functools.partial(load_token_keys, s),  # loaded when a service first needs them
            reset_policy=policy(s, ResetPolicy),
            otp_policy=policy(s, OtpPolicy),
            delivery_policy=policy(s, DeliveryPolicy),
            send_limits=policy(s, SendLimits),
            fairness=policy(s, FairnessPolicy),
            reset_url=s.reset_url,
            product_name=s.product_name,
            support_contact=s.support_contact,
            email_templates=load_templates(s.templates_dir),
            otp_purposes=parse_purpose_list(s.otp_purposes),
        )

    @functools.cached_property
    def mailer(self) -> Mailer:
        return build_mailer(self.settings)

    def close(self) -> None:
        for name in ("engine", "replica_engine", "outcomes_engine", "admin_engine"):
            engine = self.__dict__.pop(name, None)
            if engine is not None:
                engine.dispose()


def build_mailer(settings: Settings) -> Mailer:
    """The configured provider; Maildir under the data directory by default."""
    from infra.delivery.providers.http import HttpMailer
    from infra.delivery.providers.maildir import MaildirMailer
    from infra.delivery.providers.smtp import SmtpMailer

    window = settings.delivery_inflight
    if settings.provider == "smtp":
        assert settings.smtp_url is not None
        return SmtpMailer.from_url(settings.smtp_url, sender=settings.sender, timeout=settings.provider_timeout,
                                   window=window)
    if settings.provider == "http":
        assert settings.http_provider_url is not None
        return HttpMailer(settings.http_provider_url, api_key=settings.http_provider_key,
                          timeout=settings.provider_timeout, window=window)
    return MaildirMailer(settings.maildir_path, sender=settings.sender, window=window)


def stop_on_sigterm() -> None:
    """Turn SIGTERM into a normal exit for a long-running command, so its
    ``finally`` blocks and exit hooks run (the embedded server's among them)."""

    def _exit(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, _exit)
