"""Load and check the email templates: the package's defaults, an operator's folder over them, a tenant's data.

The package ships every email in English (``defaults/``) and German
(``defaults/de/``). A folder (``AUTHLEDGER_TEMPLATES_DIR``) holds any of the
files in ``defaults/`` (``reset_link.subject``, ``reset_link.txt``,
``reset_link.html``, the same for ``password_changed`` and ``otp_code``):
a file at its top replaces the English one, a file in a subfolder named by a
language tag (``de/``, ``fr-CA/``) replaces or adds that language's. A file
a language lacks is taken from the next language in the email's fallback
chain when the email is rendered (``domain.templates.localized``).
Overrides given as data (``{locale: {file name: text}}``, a tenant's own
texts) go over all of it. Everything is checked once, when loaded: a
template that leaves out the link or the code, names a placeholder that does
not exist, or a subject of more than one line is refused with one line that
names the file, as is a file or folder name authledger would not use.
Filling the templates is the domain's (``domain.templates``).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

from domain.errors import ConfigError, InvalidInput
from domain.locales import ENGLISH, parse_locale
from domain.templates import EMAILS, PARTS, TemplateFiles, TemplateSets, template_problem

_FILES = {f"{email}.{part}" for email in EMAILS for part in PARTS}


@functools.cache
def default_templates() -> TemplateSets:
    """The templates shipped in the package."""
    return load_templates(None)


def load_templates(folder: Path | None, overrides: TemplateFiles | None = None) -> TemplateSets:
    """The templates: the package's, ``folder``'s files over them, ``overrides`` over those; ``ConfigError``
    names the first bad file."""
    by_locale = _read(resources.files("infra.emails").joinpath("defaults"))
    if folder is not None:
        if not folder.is_dir():
            raise ConfigError(f"AUTHLEDGER_TEMPLATES_DIR {folder} is not a folder")
        for locale, files in _read_folder(folder).items():
            by_locale.setdefault(locale, {}).update(files)
    sets = TemplateSets(by_locale).overlaid(check_overrides(overrides or {}))
    assert _FILES <= set(sets.by_locale[ENGLISH]), "the package ships every English file"
    return sets


def check_overrides(overrides: Mapping[str, Mapping[str, str]]) -> dict[str, dict[str, str]]:
    """Template texts given as data, keyed by their locales' normalised tags; ``ConfigError`` for a bad one."""
    checked: dict[str, dict[str, str]] = {}
    for tag, files in overrides.items():
        locale = _locale_named(tag, f"template override locale {tag!r}")
        for name, text in files.items():
            if name not in _FILES:
                raise ConfigError(f"template override {locale}/{name} is not one authledger sends; the names are "
                                  f"{', '.join(sorted(_FILES))}")
            _check(name, text, f"template override {locale}/{name}")
            checked.setdefault(locale, {})[name] = text
    return checked


def _read(folder: Traversable) -> dict[str, dict[str, str]]:
    """The package's files: English at the top, a language per subfolder."""
    by_locale = {ENGLISH: _package_files(folder, "")}
    for entry in folder.iterdir():
        if entry.is_dir() and not entry.name.startswith("_"):
            by_locale[entry.name] = _package_files(entry, f"{entry.name}/")
    return by_locale


def _package_files(folder: Traversable, where: str) -> dict[str, str]:
    files = {}
    for entry in folder.iterdir():
        if entry.is_file() and entry.name in _FILES:
            files[entry.name] = text = entry.read_text(encoding="utf-8")
            _check(entry.name, text, f"email template {where}{entry.name}")
    return files


def _read_folder(folder: Path) -> dict[str, dict[str, str]]:
    """An operator's folder: its top-level files as English, each subfolder as the language it names."""
    by_locale = {ENGLISH: _read_files(folder)}
    for path in sorted(folder.iterdir()):
        if path.is_dir():
            locale = _locale_named(path.name, f"email template folder {path}")
            by_locale.setdefault(locale, {}).update(_read_files(path))
    return by_locale


def _read_files(folder: Path) -> dict[str, str]:
    files = {}
    for path in sorted(folder.iterdir()):
        # A misspelt file name would silently keep the default: refuse it instead.
        if path.suffix.lstrip(".") in PARTS and path.name not in _FILES:
            raise ConfigError(
                f"email template {path} is not one authledger sends; the names are {', '.join(sorted(_FILES))}"
            )
        if path.is_file() and path.name in _FILES:
            files[path.name] = text = path.read_text(encoding="utf-8")
            _check(path.name, text, f"email template {path}")
    return files


def _locale_named(tag: str, where: str) -> str:
    try:
        return parse_locale(tag)
    except InvalidInput:
        raise ConfigError(f"{where} is not named by a language tag such as de or de-AT") from None


def _check(name: str, text: str, where: str) -> None:
    # The one rule of a template (domain.templates), which a tenant's overrides pass too.
    if (problem := template_problem(name, text)) is not None:
        raise ConfigError(f"{where} {problem}")
