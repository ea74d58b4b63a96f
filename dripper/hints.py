"""The one "did you mean" of every error that names an unknown choice (labelers, fallbacks, options…)."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = ["did_you_mean"]


def did_you_mean(name: object, choices: Iterable[str], n: int = 3, cutoff: float = 0.6) -> str:
    """``"; did you mean 'a' or 'b'?"`` for the choices closest to ``name``, or ``""`` when none is close.

    Appended to an error message that already lists what is known, so a typo's fix is one glance away.
    """
    close = difflib.get_close_matches(str(name), list(choices), n=n, cutoff=cutoff)
    return f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
