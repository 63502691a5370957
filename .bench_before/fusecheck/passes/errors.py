"""Errors raised by the toggle registry. Both are ValueErrors so CLIs map them to exit code 2."""
from __future__ import annotations


class ToggleError(ValueError):
    """A toggle name is unknown, or the toggles cannot be applied in this context."""


class ToggleUnsupported(ToggleError):
    """The installed torch lacks what a toggle needs; the message names the attribute and the version."""
