"""Load and check the email templates: the package's defaults, or an operator's folder over them.

A folder (``AUTHLEDGER_TEMPLATES_DIR``) holds any of the files in
``defaults/`` (``reset_link.subject``, ``reset_link.txt``,
``reset_link.html``, the same for ``password_changed`` and ``otp_code``);
a file it holds replaces the default, one it lacks keeps it. Everything is
checked once, at start: a template that leaves out the link or the code,
names a placeholder that does not exist, or a subject of more than one line
stops start-up with one line that names the file. Filling the templates is
the domain's (``domain.templates``).
"""

from __future__ import annotations

import functools
from importlib import resources
from pathlib import Path

from domain.errors import ConfigError
from domain.templates import EMAILS, PARTS, EmailTemplate, EmailTemplates, template_problem

_FILES = {f"{email}.{part}" for email in EMAILS for part in PARTS}


@functools.cache
def default_templates() -> EmailTemplates:
    """The templates shipped in the package."""
    return load_templates(None)


def load_templates(folder: Path | None) -> EmailTemplates:
    """The templates, ``folder``'s files over the defaults; ``ConfigError`` names the first bad file."""
    if folder is not None:
        _check_folder(folder)
    emails = {}
    for email, placeholders in EMAILS.items():
        parts = {}
        for part in PARTS:
            name = f"{email}.{part}"
            path = folder / name if folder is not None and (folder / name).is_file() else None
            text = path.read_text(encoding="utf-8") if path else _default(name)
            _check(name, part, text, placeholders.allowed, placeholders.required_in_bodies, path)
            parts[part] = text
        emails[email] = EmailTemplate(**parts)
    return EmailTemplates(**emails)


def _default(name: str) -> str:
    return resources.files("infra.emails").joinpath("defaults", name).read_text(encoding="utf-8")


def _check_folder(folder: Path) -> None:
    if not folder.is_dir():
        raise ConfigError(f"AUTHLEDGER_TEMPLATES_DIR {folder} is not a folder")
    # A misspelt file name would silently keep the default: refuse it instead.
    for path in sorted(folder.iterdir()):
        if path.suffix.lstrip(".") in PARTS and path.name not in _FILES:
            raise ConfigError(
                f"email template {path} is not one authledger sends; the names are {', '.join(sorted(_FILES))}"
            )


def _check(
    name: str, part: str, text: str, allowed: frozenset[str], required: frozenset[str], path: Path | None
) -> None:
    # The one rule of a template (domain.templates), which a tenant's overrides pass too.
    if (problem := template_problem(name, text)) is not None:
        raise ConfigError(f"email template {path or name} {problem}")
