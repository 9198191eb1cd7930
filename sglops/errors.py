"""User-facing errors: each one prints as a single line and exits non-zero (tracebacks are for bugs)."""

from __future__ import annotations


class SglopsError(Exception):
    """An error the user can cause or fix; `str()` is the one line they see."""

    exit_code = 2


class ConfigError(SglopsError):
    """A YAML file, inventory entry or argument is wrong."""


class HostNotFound(SglopsError):
    """A --host name is neither in the inventory nor an address."""


class ConnectError(SglopsError):
    """The host could not be reached or refused us (unreachable, auth, host key)."""

    exit_code = 3


class HostKeyError(ConnectError):
    """The host key is unknown or changed: never silently accepted."""


class RemoteTimeout(SglopsError):
    """A remote command ran past its timeout (it was killed on the host)."""

    exit_code = 4


class RemoteError(SglopsError):
    """A remote command or script failed; the message names what and where."""

    exit_code = 5
