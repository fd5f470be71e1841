"""The end user's IP address, as the application passes it: checked, and reduced to what a limit counts.

An application may pass ``client_ip`` with a create or a verify, so that the
limits can tell one end user's calls from another's (``domain.send_limits``).
It is personal data: the services only ever keep a keyed hash of what
``limit_subject`` returns, never the address itself.
"""

from __future__ import annotations

import ipaddress

from domain.errors import InvalidInput

# An IPv6 end user gets a /64 from their provider (RFC 6177): counting single
# addresses would give one attacker 2**64 fresh allowances.
IPV6_PREFIX = 64
MAX_TEXT = 45  # the longest textual IPv6 address (an IPv4-mapped one, without zone)
RULE = "one IPv4 or IPv6 address, like 203.0.113.7 or 2001:db8::1, without port, prefix or zone"


def limit_subject(client_ip: object) -> str:
    """What the limits count for ``client_ip``: an IPv4 address, or an IPv6 address's /64, canonical.

    An IPv4-mapped IPv6 address (``::ffff:203.0.113.7``) counts as its IPv4
    address, so a dual-stack proxy cannot double an allowance. ``InvalidInput``
    for anything else, and the message never repeats the value.
    """
    if not isinstance(client_ip, str) or not 0 < len(client_ip) <= MAX_TEXT or "%" in client_ip:
        raise InvalidInput(f"client_ip must be {RULE}")
    try:
        address = ipaddress.ip_address(client_ip)
    except ValueError:
        raise InvalidInput(f"client_ip must be {RULE}") from None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    if isinstance(address, ipaddress.IPv6Address):
        return str(ipaddress.IPv6Network((address, IPV6_PREFIX), strict=False))
    return str(address)
