"""Reading a request at the edge: bounded JSON bodies, checked against the operation's schema.

Everything here runs before any database work, so a rejected request writes
nothing. The checker covers the JSON Schema subset that ``infra.http.schemas``
uses (objects of strings, required fields, no unknown fields, lengths and
anchored patterns) and reports every problem with a JSON pointer.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from functools import cache
from typing import Any
from uuid import UUID

from starlette.requests import Request

from domain.addresses import RULE as ADDRESS_RULE
from domain.addresses import address_problem
from domain.input_checks import user_id_problem
from domain.client_ips import RULE as CLIENT_IP_RULE
from domain.locales import LOCALE_PATTERN
from domain.locales import RULE as LOCALE_RULE
from infra.errors import Unauthorized
from infra.http.problems import (
    BodyTooLarge,
    InvalidBody,
    InvalidEmail,
    InvalidIdempotencyKey,
    InvalidQuery,
    MalformedJson,
    MissingIdempotencyKey,
    UnsupportedMediaType,
    UserIdRefused,
)
from infra.http.schemas import (
    CLIENT_IP_PATTERN, EMAIL_PATTERN, IDEMPOTENCY_KEY_PATTERN, NEW_USER_ID_PATTERN, UUID_PATTERN, Schema,
)

MAX_BODY_BYTES = 16 * 1024
# No field takes a number; this only bounds the work and keeps Python's own
# "sys.set_int_max_str_digits()" complaint (past 4300 digits) out of answers.
MAX_NUMBER_DIGITS = 100
API_KEY_SHAPE = re.compile(r"alk_[A-Za-z0-9_-]{43}")


@cache
def _compiled(pattern: str) -> re.Pattern[str]:
    # JSON Schema patterns are ECMA-262, where a final `$` matches only at
    # the very end; Python's also matches before a trailing newline.
    return re.compile(pattern[:-1] + r"\Z" if pattern.endswith("$") else pattern)


def schema_errors(schema: Schema, value: Any, pointer: str = "") -> list[dict[str, str]]:
    """Every way ``value`` breaks ``schema``, each with a JSON pointer to the culprit."""
    name = pointer.rsplit("/", 1)[-1] or "the body"
    kind = schema.get("type")
    if isinstance(kind, list):  # [kind, "null"]: null gives a setting back to its default
        if value is None and "null" in kind:
            return []
        [kind] = [one for one in kind if one != "null"]
        schema = {**schema, "type": kind, **({"enum": [v for v in schema["enum"] if v is not None]}
                                             if "enum" in schema else {})}
    if kind == "integer":
        low, high = schema.get("minimum"), schema.get("maximum")
        # JSON Schema's integer is a number without a fraction: 600.0 is one (the handler reads it as 600).
        if isinstance(value, bool) or not (isinstance(value, int) or (isinstance(value, float) and value.is_integer())):
            return [{"pointer": pointer, "detail": f"{name} must be a whole number"}]
        if (low is not None and value < low) or (high is not None and value > high):
            return [{"pointer": pointer, "detail": f"{name} must be between {low} and {high}"}]
        return []
    if kind == "object":
        if not isinstance(value, dict):
            return [{"pointer": pointer, "detail": f"{name} must be a JSON object"}]
        errors = [
            {"pointer": f"{pointer}/{field}", "detail": f"{field} is required"}
            for field in schema.get("required", []) if field not in value
        ]
        properties = schema.get("properties", {})
        for field, item in value.items():
            if field not in properties:
                errors.append({"pointer": f"{pointer}/{field}", "detail": f"unknown field {field!r}"})
            else:
                errors += schema_errors(properties[field], item, f"{pointer}/{field}")
        return errors
    if kind == "array":
        return _array_errors(name, schema, value, pointer)
    if kind == "boolean":
        return [] if isinstance(value, bool) else [{"pointer": pointer, "detail": f"{name} must be true or false"}]
    if kind == "string" or (kind is None and "enum" in schema):
        if not isinstance(value, str):
            return [{"pointer": pointer, "detail": f"{name} must be a string"}]
        if schema.get("pattern") == EMAIL_PATTERN:
            # The schema states the address rule for the document's readers
            # and generators; the domain's one rule decides, as for the CLI.
            problem = address_problem(value)
            return [{"pointer": pointer, "detail": f"{name} {NOT_AN_EMAIL}: {problem}"}] if problem else []
        if schema.get("pattern") == NEW_USER_ID_PATTERN and (problem := user_id_problem(value)):
            # Likewise the user-id rule, which also reads an @ hidden by encoding (%40, &#64;).
            return [{"pointer": pointer, "detail": f"{name} {REFUSED}: {problem}"}]
        if schema.get("pattern") == CLIENT_IP_PATTERN:
            # The pattern is long: say the rule in words rather than quote it.
            matched = len(value) <= schema["maxLength"] and _compiled(CLIENT_IP_PATTERN).search(value)
            return [] if matched else [{"pointer": pointer, "detail": f"{name} must be {CLIENT_IP_RULE}"}]
        if schema.get("pattern") == LOCALE_PATTERN and _string_problem(name, schema, value):
            return [{"pointer": pointer, "detail": f"{name} must be {LOCALE_RULE}"}]
        detail = _string_problem(name, schema, value)
        return [{"pointer": pointer, "detail": detail}] if detail else []
    raise ValueError(f"schema type {kind!r} is not supported by this checker")


NOT_AN_EMAIL = f"must be {ADDRESS_RULE}"
REFUSED = "is refused"


def _array_errors(name: str, schema: Schema, value: Any, pointer: str) -> list[dict[str, str]]:
    if not isinstance(value, list):
        return [{"pointer": pointer, "detail": f"{name} must be a JSON array"}]
    if len(value) < schema.get("minItems", 0):
        return [{"pointer": pointer, "detail": f"{name} needs at least {schema['minItems']} item(s)"}]
    if "maxItems" in schema and len(value) > schema["maxItems"]:
        return [{"pointer": pointer, "detail": f"{name} holds at most {schema['maxItems']} items"}]
    errors = [error for i, item in enumerate(value) for error in schema_errors(schema["items"], item, f"{pointer}/{i}")]
    if not errors and schema.get("uniqueItems") and len(set(value)) != len(value):
        errors.append({"pointer": pointer, "detail": f"{name} names an item twice"})
    return errors


def _string_problem(name: str, schema: Schema, value: str) -> str | None:
    if "enum" in schema and value not in schema["enum"]:
        return f"{name} must be one of: {', '.join(schema['enum'])}"
    if len(value) < schema.get("minLength", 0):
        return f"{name} must not be empty"
    if "maxLength" in schema and len(value) > schema["maxLength"]:
        return f"{name} must be at most {schema['maxLength']} characters"
    if "pattern" in schema and not _compiled(schema["pattern"]).search(value):
        return f"{name} is malformed: {schema.get('description') or 'it must match ' + schema['pattern']}"
    return None


def check_body(schema: Schema, data: Any) -> dict[str, Any]:
    """``data`` when it matches ``schema``; ``InvalidEmail``, ``UserIdRefused`` or ``InvalidBody`` naming every
    problem (the first two when that is the only kind of problem)."""
    errors = schema_errors(schema, data)
    if not errors:
        return data
    detail = "; ".join(error["detail"] for error in errors)
    if all(NOT_AN_EMAIL in e["detail"] for e in errors):
        raise InvalidEmail(detail, errors=errors)
    if all(f" {REFUSED}: " in e["detail"] for e in errors):
        raise UserIdRefused(detail, errors=errors)
    raise InvalidBody(detail, errors=errors)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    data = dict(pairs)
    if len(data) != len(pairs):
        raise ValueError("a field appears twice")
    return data


def _bounded_int(digits: str) -> int:
    if len(digits.lstrip("-")) > MAX_NUMBER_DIGITS:
        raise ValueError(f"a number has more than {MAX_NUMBER_DIGITS} digits")
    return int(digits)


def parse_json(raw: bytes) -> Any:
    """Strict JSON: UTF-8, no NaN or Infinity, no field given twice, no integer over 100 digits."""
    try:
        return json.loads(raw.decode("utf-8"), parse_constant=_reject_constant, object_pairs_hook=_no_duplicates,
                          parse_int=_bounded_int)
    except (UnicodeDecodeError, ValueError) as error:
        reason = "it is not UTF-8" if isinstance(error, UnicodeDecodeError) else str(error)
        raise MalformedJson(f"the body is not valid JSON: {reason}") from None
    except RecursionError:
        # A body of a few thousand "[" would otherwise exhaust the stack: a 500 for a 4xx.
        raise MalformedJson("the body is not valid JSON: it is nested too deeply") from None


def _declared_over(content_length: str, limit: int) -> bool:
    """Whether a Content-Length header declares more than ``limit`` bytes; False when it is not a number."""
    # ASCII only: "²" is a digit to isdigit() but not to int(). Length before
    # value: int() of thousands of digits is an error, not a number.
    if not (content_length.isascii() and content_length.isdigit()):
        return False
    significant = content_length.lstrip("0") or "0"
    return len(significant) > len(str(limit)) or int(significant) > limit


async def read_json(request: Request, schema: Schema, *, limit: int = MAX_BODY_BYTES) -> dict[str, Any]:
    """The request's JSON body, checked against ``schema``; read no further than ``limit`` bytes."""
    return check_body(schema, parse_json(await read_body(request, limit=limit)))


async def read_body(request: Request, *, limit: int = MAX_BODY_BYTES) -> bytes:
    """The request's JSON body as sent (a signature covers the bytes); read no further than ``limit`` bytes."""
    media_type = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if media_type != "application/json":
        raise UnsupportedMediaType(f"send the body as application/json, not {media_type or 'nothing'}")
    declared = request.headers.get("content-length", "")
    if _declared_over(declared, limit):
        raise BodyTooLarge(f"the body is {declared} bytes; the limit is {limit}")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(f"the body is over the limit of {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def idempotency_key(request: Request) -> str:
    """The Idempotency-Key header's key: a Structured Field string or a bare token, 1-255 characters."""
    values = request.headers.getlist("idempotency-key")
    if not values:
        raise MissingIdempotencyKey("send an Idempotency-Key header (a unique string, e.g. a UUID) with every create")
    if len(values) > 1 or not _compiled(IDEMPOTENCY_KEY_PATTERN).search(values[0]):
        raise InvalidIdempotencyKey(
            "Idempotency-Key must be one value of 1-255 printable ASCII characters without spaces"
        )
    value = values[0]
    quoted = len(value) >= 2 and value[0] == value[-1] == '"' and '"' not in value[1:-1] and "\\" not in value
    return value[1:-1] if quoted else value


def bearer_key(request: Request) -> str:
    """The API key of ``Authorization: Bearer <key>``; ``Unauthorized`` when absent or not shaped like one."""
    scheme, _, key = request.headers.get("authorization", "").partition(" ")
    key = key.strip()
    if scheme.lower() != "bearer" or not API_KEY_SHAPE.fullmatch(key):
        raise Unauthorized("send a valid API key as 'Authorization: Bearer <key>'")
    return key


def single_query(request: Request, allowed: Mapping[str, Schema]) -> dict[str, str]:
    """The query parameters, each at most once and each one of ``allowed``, checked against its schema."""
    given: dict[str, str] = {}
    for name, value in request.query_params.multi_items():
        if name not in allowed:
            raise InvalidQuery(f"unknown query parameter {name!r}; expected one of {', '.join(allowed)}")
        if name in given:
            raise InvalidQuery(f"query parameter {name!r} is given twice")
        errors = schema_errors(allowed[name], value, f"/{name}")
        if errors:
            raise InvalidQuery(errors[0]["detail"])
        given[name] = value
    return given


def canonical_uuid(value: str) -> UUID | None:
    """``value`` as a UUID if it is written in the canonical 8-4-4-4-12 form, else None."""
    return UUID(value) if _compiled(UUID_PATTERN).search(value) else None
