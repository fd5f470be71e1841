"""Configuration from the environment (and CLI options), validated at start.

Each setting is declared once, as a field of ``Settings`` that carries its
environment variable, parser, doc line and the policy field it feeds;
reading, ``config show``, the policies and the settings table of
docs/configuration.md all come from that declaration.

Every bad value is reported, one line each, before anything starts: a
service that runs with half its configuration is worse than one that
refuses to run.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar, get_type_hints

from attrs import field, fields, frozen

from domain.delivery import RECORD_WITHIN, DeliveryPolicy
from domain.errors import ConfigError
from domain.fairness import FairnessPolicy
from domain.policy import ACCOUNT_LOCK_CEILING, POLICY_OVERRIDES, OtpPolicy, ResetPolicy
from domain.tenants import DEFAULT_PURPOSES, purpose_list_text
from domain.send_limits import SendLimits
from infra.config import values
from infra.config.cores import usable_cores

PROVIDERS = ("maildir", "smtp", "http")
LOG_FORMATS = ("auto", "json", "text")
# `serve`'s processes when nothing says how many: one for each core, as more
# served no clearly more requests (bench/RESULTS.md, "serve's processes by default")
# while each keeps a pool of 20 connections (infra/http/serve.py); and no more
# than four, whose pools fit within PostgreSQL's default max_connections of
# 100 with room for the CLI and other workers.
MOST_DEFAULT_API_PROCESSES = 4


def _overridable(name: str) -> Callable[[str], int]:
    """The parser of a rule a tenant may set too: the bounds both are held to (``domain.policy.POLICY_OVERRIDES``)."""
    return values.bounded(POLICY_OVERRIDES[name].bounds)


def default_api_processes() -> int:
    """One API process for each core this process may use (its affinity and CPU quota), at most four."""
    return min(usable_cores(), MOST_DEFAULT_API_PROCESSES)


@frozen
class Setting:
    """One setting as declared: where it is read from, how it is checked, what it means."""

    name: str
    variable: str
    default: Any
    parse: Callable[[str], Any]
    doc: str
    secret: bool = False
    # A URL: shown, and quoted in errors, with userinfo, query and fragment masked (``mask_url``).
    url: bool = False
    # (policy class, field name): the policy field this setting sets; seconds become a timedelta.
    feeds: tuple[type, str] | None = None


def _setting(
    variable: str, default: Any, parse: Callable[[str], Any] = str, *, doc: str, secret: bool = False,
    url: bool = False, feeds: tuple[type, str] | None = None,
) -> Any:
    # Typed Any so that each field keeps the type annotated on it; a secret stays
    # out of repr() so that no log or traceback prints it.
    declared = {"variable": variable, "parse": parse, "doc": doc, "secret": secret, "url": url, "feeds": feeds}
    return field(default=default, repr=not secret, metadata={"setting": declared})


@frozen
class Settings:
    """The effective configuration, one typed field per setting."""

    data_dir: Path = _setting("AUTHLEDGER_DATA_DIR", Path(".authledger"), Path,
        doc="Where the embedded PostgreSQL, the development keys and the default Maildir live.")
    database_url: str | None = _setting("DATABASE_URL", None, secret=True, url=True,
        doc="PostgreSQL URL; an embedded server in the data directory when unset.")
    read_database_url: str | None = _setting("AUTHLEDGER_READ_DATABASE_URL", None, secret=True, url=True,
        doc="PostgreSQL URL of a read replica (a streaming standby) for reading work: `history`, `explain`, the "
            "timeline, the console's case, search and outbox pages, `audit verify`; each answer says how far "
            "behind it was. Never written to. The primary when unset (docs/scaling.md).")
    provider: str = _setting("AUTHLEDGER_PROVIDER", "maildir", values.choice(PROVIDERS),
        doc="How mail is sent: maildir, smtp or http.")
    maildir: Path | None = _setting("AUTHLEDGER_MAILDIR", None, Path,
        doc="Where the maildir provider delivers; `maildir` in the data directory when unset.")
    smtp_url: str | None = _setting("AUTHLEDGER_SMTP_URL", None, values.smtp_url, secret=True, url=True,
        doc="SMTP server, e.g. `smtp+starttls://user:pass@host:587`; required with the smtp provider. "
            "TLS (`smtps://`) or STARTTLS (`smtp+starttls://`); plain `smtp://` only to a loopback host.")
    http_provider_url: str | None = _setting("AUTHLEDGER_HTTP_PROVIDER_URL", None, values.https_url, url=True,
        doc="Endpoint of the HTTP JSON provider; required with the http provider. "
            "`https://`; `http://` only to a loopback host.")
    http_provider_key: str | None = _setting("AUTHLEDGER_HTTP_PROVIDER_KEY", None, secret=True,
        doc="API key sent to the HTTP JSON provider.")
    postmark_webhook_auth: str | None = _setting(
        "AUTHLEDGER_POSTMARK_WEBHOOK_AUTH", None, values.basic_credentials, secret=True,
        doc="`user:password` that Postmark's webhooks must present (set them in the webhook's URL at Postmark); "
            "unset, /v1/providers/postmark/events refuses every post. Deployment-wide.")
    sendgrid_webhook_public_key: str | None = _setting(
        "AUTHLEDGER_SENDGRID_WEBHOOK_PUBLIC_KEY", None, values.checked_text(values.ecdsa_p256_public_key),
        doc="SendGrid's Event Webhook verification key (base64, from its Mail Settings); unset, "
            "/v1/providers/sendgrid/events refuses every post. Deployment-wide.")
    bounce_maildir: Path | None = _setting("AUTHLEDGER_BOUNCE_MAILDIR", None, Path,
        doc="A Maildir of bounce reports (RFC 3464) that `serve` reads every 30 s, as `authledger bounces ingest "
            "--maildir` does; unset, nothing watches one.")
    sender: str = _setting("AUTHLEDGER_SENDER", "authledger <no-reply@authledger.localhost>", values.sender,
        doc="From address of every email, `name@example.com` or `Name <name@example.com>`: one plain address, "
            "a display name without quotes, @ or brackets. A tenant's `--sender` and `--sender-name` replace it "
            "in its emails' From (the envelope sender, where bounces go, stays this one).")
    product_name: str = _setting("AUTHLEDGER_PRODUCT_NAME", "authledger", values.product_name,
        doc="What emails call the application (`$product_name` in templates) for a tenant that names none.")
    support_contact: str | None = _setting("AUTHLEDGER_SUPPORT_CONTACT", None, values.support_contact,
        doc="Where users get help (`$support_contact` in templates; empty when unset): an address or an "
            "`https://` page, for a tenant that names none.")
    reset_url: str = _setting("AUTHLEDGER_RESET_URL", "http://localhost:8000/reset", values.https_url, url=True,
        doc="Page that reset links open, with `?token=` added. `https://`; `http://` only on localhost "
            "or a loopback address.")
    dev_reset_page: bool = _setting("AUTHLEDGER_DEV_RESET_PAGE", False, values.yes_no,
        doc="Serve the development stand-in reset page at /reset with DATABASE_URL set too "
            "(it is always on for the embedded default).")
    templates_dir: Path | None = _setting("AUTHLEDGER_TEMPLATES_DIR", None, Path,
        doc="Folder of email templates that replace the shipped ones, file by file: English at its top, "
            "another language in a subfolder named by its tag, such as de/ (docs/emails.md).")
    token_keys: str | None = _setting("AUTHLEDGER_TOKEN_KEYS", None, values.checked_text(values.parse_token_keys),
        secret=True, doc="`id:base64key,...` newest first, each at least 32 bytes: derive tokens and codes.")
    # DESIGN: a reset link never lives past 24 h.
    reset_ttl: int = _setting("AUTHLEDGER_RESET_TTL", 30 * 60, _overridable("reset_ttl"), feeds=(ResetPolicy, "ttl"),
        doc="Seconds a reset link stays valid.")
    reset_cooldown: int = _setting("AUTHLEDGER_RESET_COOLDOWN", 60, _overridable("reset_cooldown"),
        feeds=(ResetPolicy, "cooldown"),
        doc="Seconds during which the same reset request returns the open one instead of a new link.")
    reset_hourly_limit: int = _setting("AUTHLEDGER_RESET_HOURLY_LIMIT", 5, _overridable("reset_hourly_limit"),
        feeds=(ResetPolicy, "hourly_limit"), doc="Reset requests per user per hour.")
    # Limits beyond the user (domain/send_limits.py); each default's reasoning is in docs/limits.md.
    limit_per_address: int = _setting("AUTHLEDGER_LIMIT_PER_ADDRESS", 6, _overridable("limit_per_address"),
        feeds=(SendLimits, "per_address"),
        doc="Emails per recipient address per hour within a tenant, whatever the user ids (reset and code "
            "emails together).")
    limit_per_address_per_ip: int = _setting("AUTHLEDGER_LIMIT_PER_ADDRESS_PER_IP", 3, values.whole(1, 99),
        feeds=(SendLimits, "per_address_per_ip"),
        doc="Of those, how many one end-user IP (`client_ip`) may cause; smaller than the per-address limit.")
    limit_per_user_per_ip: int = _setting("AUTHLEDGER_LIMIT_PER_USER_PER_IP", 3, values.whole(1, 999),
        feeds=(SendLimits, "per_user_per_ip"),
        doc="Of a user's hourly requests of one flow, how many one end-user IP (`client_ip`) may make; held "
            "below that flow's hourly limit (one less, at most).")
    limit_per_ip: int = _setting("AUTHLEDGER_LIMIT_PER_IP", 20, values.whole(1, 100_000),
        feeds=(SendLimits, "per_ip"),
        doc="Emails one end-user IP (`client_ip`; an IPv6 /64) may cause per hour within a tenant, across users.")
    limit_verifies_per_ip: int = _setting("AUTHLEDGER_LIMIT_VERIFIES_PER_IP", 60, values.whole(1, 100_000),
        feeds=(SendLimits, "verifies_per_ip"),
        doc="Codes and links one end-user IP (`client_ip`) may have checked per hour within a tenant.")
    otp_ttl: int = _setting("AUTHLEDGER_OTP_TTL", 10 * 60, _overridable("otp_ttl"), feeds=(OtpPolicy, "ttl"),
        doc="Seconds a one-time code stays valid.")
    otp_cooldown: int = _setting("AUTHLEDGER_OTP_COOLDOWN", 60, _overridable("otp_cooldown"),
        feeds=(OtpPolicy, "cooldown"),
        doc="Seconds during which the same code request returns the open challenge instead of a new code.")
    otp_hourly_limit: int = _setting("AUTHLEDGER_OTP_HOURLY_LIMIT", 5, _overridable("otp_hourly_limit"),
        feeds=(OtpPolicy, "hourly_limit"), doc="Code requests per user per hour.")
    otp_digits: int = _setting("AUTHLEDGER_OTP_DIGITS", 6,
        _overridable("otp_digits"),
        feeds=(OtpPolicy, "digits"), doc="Digits of new one-time codes, 6 to 10; challenges already sent keep theirs.")
    otp_max_attempts: int = _setting("AUTHLEDGER_OTP_MAX_ATTEMPTS", 5, values.whole(1, 100),
        feeds=(OtpPolicy, "max_attempts"), doc="Wrong codes that lock one challenge.")
    otp_account_lock_failures: int = _setting("AUTHLEDGER_OTP_ACCOUNT_LOCK_FAILURES", 100,
        values.whole(1, ACCOUNT_LOCK_CEILING, high_because="NIST SP 800-63B: at most 100 consecutive failures"),
        feeds=(OtpPolicy, "account_lock_threshold"),
        doc="Consecutive wrong codes, across challenges, that lock the user's code flow; at most 100.")
    # Up to 30 days: a lock longer than that is a typo (or an extra zero).
    otp_account_lock_seconds: int = _setting("AUTHLEDGER_OTP_ACCOUNT_LOCK_SECONDS", 15 * 60,
        values.whole(1, 30 * 24 * 3600), feeds=(OtpPolicy, "account_lock_base"),
        doc="Seconds of the first account lock; each next one doubles.")
    otp_account_lock_max_seconds: int = _setting("AUTHLEDGER_OTP_ACCOUNT_LOCK_MAX_SECONDS", 24 * 3600,
        values.whole(1, 30 * 24 * 3600), feeds=(OtpPolicy, "account_lock_max"), doc="Longest account lock, in seconds.")
    # Four flows applications commonly ask codes for, named as the emails name the code. Anything else is
    # refused until a tenant declares it, so no caller's text reaches an email (issue 36).
    otp_purposes: str = _setting("AUTHLEDGER_OTP_PURPOSES", purpose_list_text(DEFAULT_PURPOSES), values.otp_purposes,
        doc="OTP purposes of a tenant that declares none, as `NAME=TEXT,...`: a code may be asked for only "
            "for one of them, and its email names the code by TEXT (a short line, no comma, link or address). "
            "A tenant's own list (`tenants configure NAME --purpose NAME=TEXT`) replaces these.")
    lease_seconds: int = _setting("AUTHLEDGER_LEASE_SECONDS", 45, values.whole(1, 3600),
        feeds=(DeliveryPolicy, "lease"),
        doc="Seconds a worker holds a message; must exceed the provider timeout plus the margin.")
    lease_margin_seconds: int = _setting("AUTHLEDGER_LEASE_MARGIN", 5, values.whole(0, 600),
        feeds=(DeliveryPolicy, "margin"), doc="Seconds of lease a worker needs left to start a provider call.")
    provider_timeout: int = _setting("AUTHLEDGER_PROVIDER_TIMEOUT", 10, values.whole(1, 600),
        doc="Seconds allowed for one provider call.")
    delivery_inflight: int = _setting("AUTHLEDGER_DELIVERY_INFLIGHT", 64, values.whole(1, 1024),
        doc="Provider calls a worker process keeps in flight at once; each provider keeps as many connections.")
    api_processes: int | None = _setting("AUTHLEDGER_API_PROCESSES", None, values.whole(1, 64),
        doc=f"API processes `serve` runs on its port; unset, one for each core it may use, at most "
            f"{MOST_DEFAULT_API_PROCESSES}.")
    # Rates and turns are per API process: `serve` with N processes lets a caller make up to N times as many,
    # as the kernel spreads connections over the processes. Defaults and their reasons: docs/operations.md,
    # "Fairness between tenants".
    key_rate: int = _setting("AUTHLEDGER_KEY_RATE", 50, values.whole(1, 100_000),
        feeds=(FairnessPolicy, "key_per_second"),
        doc="Requests a second one API key may make on average, in each API process; over it, 429 `per-key`.")
    key_burst: int = _setting("AUTHLEDGER_KEY_BURST", 100, values.whole(1, 100_000),
        feeds=(FairnessPolicy, "key_burst"),
        doc="Requests one API key may make at once above its rate, in each API process.")
    tenant_rate: int = _setting("AUTHLEDGER_TENANT_RATE", 100, values.whole(1, 100_000),
        feeds=(FairnessPolicy, "tenant_per_second"),
        doc="Requests a second all of one tenant's keys may make on average, in each API process; over it, "
            "429 `per-tenant`.")
    tenant_burst: int = _setting("AUTHLEDGER_TENANT_BURST", 200, values.whole(1, 100_000),
        feeds=(FairnessPolicy, "tenant_burst"),
        doc="Requests one tenant may make at once above its rate, in each API process.")
    tenant_in_flight: int = _setting("AUTHLEDGER_TENANT_IN_FLIGHT", 2, values.whole(1, 1024),
        feeds=(FairnessPolicy, "tenant_in_flight"),
        doc="Requests of one tenant that an API process runs at once while it is alone there; the next wait "
            "without a thread or a database connection.")
    shared_in_flight: int = _setting("AUTHLEDGER_TENANT_IN_FLIGHT_SHARED", 1, values.whole(1, 1024),
        feeds=(FairnessPolicy, "shared_in_flight"),
        doc="Requests of one tenant that an API process runs at once while another tenant is active there "
            "(a request in the last second); at most AUTHLEDGER_TENANT_IN_FLIGHT.")
    in_flight_wait: int = _setting("AUTHLEDGER_IN_FLIGHT_WAIT", 2, values.whole(0, 60),
        feeds=(FairnessPolicy, "in_flight_wait"),
        doc="Seconds a request waits for one of its tenant's turns before a 429 `tenant-busy`; 0 refuses at once.")
    max_attempts: int | None = _setting("AUTHLEDGER_MAX_ATTEMPTS", None, values.whole(1, 1000),
        feeds=(DeliveryPolicy, "max_attempts"),
        doc="Optional hard cap on send attempts; unset, a message is retried until its link or code expires.")
    unknown_outcome_retries: int = _setting("AUTHLEDGER_UNKNOWN_OUTCOME_RETRIES", 1, values.whole(0, 10),
        feeds=(DeliveryPolicy, "unknown_outcome_retries"),
        doc="Sends after an unknown outcome through a provider that cannot drop repeats (SMTP): each may be "
            "one more copy; past them the message ends `unknown`.")
    retry_backoff_cap: int = _setting("AUTHLEDGER_RETRY_BACKOFF_CAP", 60, values.whole(1, 3600),
        feeds=(DeliveryPolicy, "backoff_cap"), doc="Longest wait, in seconds, between two attempts of one message.")
    host_name: str | None = _setting("AUTHLEDGER_HOST_NAME", None, values.host_name,
        doc="This host's name where `/readyz` and `/metrics` say which host runs the catch-up runner and the "
            "counts writer; unset, the host name and process id.")
    poll_seconds: float = _setting("AUTHLEDGER_POLL_SECONDS", 5.0, values.seconds,
        doc="Longest an idle worker or catch-up runner waits without a notification.")
    # Generous for any real client (its headers come in one packet; a body is at most 16 KiB, so 10 s asks for
    # 1.6 KB/s) and short enough that a slowloris must keep opening connections to hold the server's.
    http_header_timeout: float = _setting("AUTHLEDGER_HTTP_HEADER_TIMEOUT", 10.0, values.seconds,
        doc="Seconds a connection has to send a request's headers; past them it is closed (after a 408).")
    http_body_timeout: float = _setting("AUTHLEDGER_HTTP_BODY_TIMEOUT", 10.0, values.seconds,
        doc="Seconds a request has to send its body once its headers are in; past them, a 408 and nothing written.")
    log_format: str = _setting("AUTHLEDGER_LOG_FORMAT", "auto", values.choice(LOG_FORMATS),
        doc="Log lines as json, text, or auto (JSON when stderr is not a terminal).")
    master_key: str | None = _setting("AUTHLEDGER_MASTER_KEY", None, values.checked_text(values.parse_master_keys),
        secret=True,
        doc="`id:base64key,...` newest first, 32 bytes each: wrap the per-user data keys; required with DATABASE_URL.")
    signing_key: str | None = _setting("AUTHLEDGER_SIGNING_KEY", None, values.checked_text(values.parse_signing_key),
        secret=True, doc="Base64 Ed25519 private key that signs audit digests.")
    console_idle_minutes: int = _setting("AUTHLEDGER_CONSOLE_IDLE_MINUTES", 15, values.whole(1, 24 * 60),
        doc="Minutes without a request after which a review console session ends.")
    signing_key_file: Path | None = _setting("AUTHLEDGER_SIGNING_KEY_FILE", None, Path,
        doc="File holding the audit signing key, instead of the variable.")

    @property
    def maildir_path(self) -> Path:
        return self.maildir or self.data_dir / "maildir"

    @property
    def api_process_count(self) -> int:
        return self.api_processes or default_api_processes()


SETTINGS: tuple[Setting, ...] = tuple(
    Setting(name=f.name, default=f.default, **f.metadata["setting"]) for f in fields(Settings)
)
_VARIABLE = {setting.name: setting.variable for setting in SETTINGS}


def load_settings(environ: Mapping[str, str], overrides: Mapping[str, Any] | None = None) -> Settings:
    """Settings from environment variables, then CLI options; every bad value reported at once."""
    given = {s.name: environ[s.variable] for s in SETTINGS if environ.get(s.variable, "") != ""}
    given.update({name: value for name, value in (overrides or {}).items() if value is not None})
    values: dict[str, Any] = {}
    problems: list[str] = []
    for setting in (s for s in SETTINGS if s.name in given):
        raw = given[setting.name]
        try:
            values[setting.name] = setting.parse(raw) if isinstance(raw, str) else raw
        except ValueError as error:
            problems.append(f"{setting.variable} {error}")
    settings = Settings(**values) if not problems else None
    if settings is not None:
        problems += _cross_checks(settings)
    if problems:
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(problems))
    assert settings is not None
    return settings


def _cross_checks(settings: Settings) -> list[str]:
    var = _VARIABLE
    problems = []
    if settings.provider == "smtp" and not settings.smtp_url:
        problems.append(f"{var['smtp_url']} is required when {var['provider']}=smtp")
    if settings.provider == "http" and not settings.http_provider_url:
        problems.append(f"{var['http_provider_url']} is required when {var['provider']}=http")
    if settings.otp_account_lock_max_seconds < settings.otp_account_lock_seconds:
        problems.append(
            f"{var['otp_account_lock_max_seconds']} ({settings.otp_account_lock_max_seconds}) must not be shorter "
            f"than {var['otp_account_lock_seconds']} ({settings.otp_account_lock_seconds})"
        )
    # A sub-allowance as large as its whole would let calls from one IP use the whole up.
    if settings.limit_per_address_per_ip >= settings.limit_per_address:
        problems.append(f"{var['limit_per_address_per_ip']} ({settings.limit_per_address_per_ip}) must be smaller "
                        f"than {var['limit_per_address']} ({settings.limit_per_address})")
    if settings.signing_key and settings.signing_key_file:
        problems.append(f"set {var['signing_key']} or {var['signing_key_file']}, not both")
    # A claimed message's provider call starts at once. A lease shorter than
    # that call, the margin and the wait for its outcome to be recorded would
    # let a second worker claim a message while the first is still sending it.
    recording = RECORD_WITHIN.total_seconds()
    if settings.lease_seconds <= settings.provider_timeout + settings.lease_margin_seconds + recording:
        problems.append(
            f"{var['lease_seconds']} ({settings.lease_seconds}) must exceed {var['provider_timeout']} "
            f"({settings.provider_timeout}) plus {var['lease_margin_seconds']} ({settings.lease_margin_seconds}) "
            f"plus {recording:g}s for recording the outcome"
        )
    return problems


# Keys generated into the data directory on the embedded default (infra/keys.py; the audit signing key in
# infra/audit/digest.py).
DEV_KEY_FILES = {"token_keys": "dev-token-key", "master_key": "dev-master-key", "signing_key": "dev-signing-key.pem"}


@frozen
class Shown:
    """One setting as ``config show`` prints it: its effective value (secrets masked) and where it came from."""

    variable: str
    value: Any
    source: str


def shown_settings(settings: Settings, environ: Mapping[str, str], command_line: frozenset[str] = frozenset()
                   ) -> list[Shown]:
    """Every setting's effective value and source: command line, environment, default, or what stands in
    for an unset one on the embedded default (the embedded database, a generated development key)."""
    return [Shown(s.variable, *_value_and_source(settings, s, environ, command_line)) for s in SETTINGS]


def _value_and_source(settings: Settings, setting: Setting, environ: Mapping[str, str],
                      command_line: frozenset[str]) -> tuple[Any, str]:
    value = getattr(settings, setting.name)
    if setting.name == "dev_reset_page" and settings.database_url is None:
        # What `serve` does (infra/http/serve.py, reset_page_enabled), whatever the variable says.
        return True, "always on for the embedded default"
    if setting.name in command_line:
        source = "command line"
    elif environ.get(setting.variable, "") != "":
        source = "environment"
    elif settings.database_url is None and setting.name == "database_url":
        return f"embedded PostgreSQL in {settings.data_dir / 'pgdata'}", "embedded database: `authledger db url`"
    elif settings.database_url is None and setting.name in DEV_KEY_FILES and not (
            setting.name == "signing_key" and settings.signing_key_file is not None):
        return f"*** from {settings.data_dir / DEV_KEY_FILES[setting.name]}", "generated development key file"
    elif setting.name == "maildir" and value is None:
        return str(settings.maildir_path), "default, in the data directory"
    elif setting.name == "api_processes" and value is None:
        return settings.api_process_count, f"default, one for each core (at most {MOST_DEFAULT_API_PROCESSES})"
    else:
        source = "default"
    if value is None:
        return None, source
    if setting.url:
        return values.mask_url(value), source
    if setting.secret:
        return "***", source
    return (str(value) if isinstance(value, Path) else value), source


Policy = TypeVar("Policy")


def policy(settings: Settings, kind: type[Policy]) -> Policy:
    """The ``kind`` policy (ResetPolicy, OtpPolicy, DeliveryPolicy, SendLimits) from the settings that feed it."""
    types = get_type_hints(kind)
    arguments: dict[str, Any] = {}
    for setting in SETTINGS:
        if setting.feeds is not None and setting.feeds[0] is kind:
            target, value = setting.feeds[1], getattr(settings, setting.name)
            arguments[target] = timedelta(seconds=value) if types[target] is timedelta else value
    return kind(**arguments)


TABLE_START, TABLE_END = "<!-- settings:start -->", "<!-- settings:end -->"


def settings_table() -> str:
    """The settings table of docs/configuration.md: variable, default and meaning of every setting."""
    rows = ["| Variable | Default | Meaning |", "| --- | --- | --- |"]
    for setting in SETTINGS:
        default = "(unset)" if setting.default is None else f"`{setting.default}`"
        rows.append(f"| `{setting.variable}` | {default} | {setting.doc} |")
    return "\n".join(rows)


def with_settings_table(page: str) -> str:
    """``page`` with the text between the settings markers replaced by a fresh table."""
    before, start, rest = page.partition(TABLE_START)
    _, end, after = rest.partition(TABLE_END)
    if not (start and end):
        raise ValueError(f"the page has no {TABLE_START} ... {TABLE_END} section")
    return f"{before}{start}\n{settings_table()}\n{end}{after}"


if __name__ == "__main__":
    # python -m infra.config.settings docs/configuration.md: regenerate the settings table in place.
    page = Path(sys.argv[1])
    page.write_text(with_settings_table(page.read_text()))
