"""A tenant's template overrides read from a folder (`tenants configure NAME --template-dir DIR`).

The folder holds template files named as the deployment's are
(``reset_link.subject``, ``otp_code.html``...) for the tenant's default
locale, and sub-folders named by shipped locales (``de/``, ``en/``) for the
others. Each file is then checked by the one template rule
(``domain.templates.template_problem``) where the settings are decided; here
anything that is neither a template file nor a locale folder is refused, so
that a misspelt name never silently keeps the deployment's text.
"""

from __future__ import annotations

from pathlib import Path

from domain.branding import SHIPPED_LOCALES
from domain.errors import InvalidInput
from domain.templates import FILES
from domain.tenants import MAX_TEMPLATE, TemplateOverride


def read_template_dir(folder: Path, default_locale: str) -> tuple[TemplateOverride, ...]:
    """The overrides ``folder`` holds: its files for ``default_locale``, its locale folders' for theirs."""
    if not folder.is_dir():
        raise InvalidInput(f"--template-dir {folder} is not a folder")
    overrides = []
    for path in sorted(folder.iterdir()):
        if path.is_dir() and path.name in SHIPPED_LOCALES:
            overrides += [_read(file, path.name) for file in sorted(path.iterdir())]
        else:
            overrides.append(_read(path, default_locale))
    return tuple(overrides)


def _read(path: Path, locale: str) -> TemplateOverride:
    if not path.is_file() or path.name not in FILES:
        raise InvalidInput(f"{path} is not an email template authledger sends (nor a folder of a shipped locale, "
                           f"{', '.join(SHIPPED_LOCALES)}); the names are {', '.join(sorted(FILES))}")
    if path.stat().st_size > MAX_TEMPLATE * 4:
        raise InvalidInput(f"email template {path} is over {MAX_TEMPLATE} characters")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise InvalidInput(f"email template {path} is not UTF-8 text") from None
    return TemplateOverride(locale, path.name, text)
