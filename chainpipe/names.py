"""The one wording of "unknown name" errors: solvers, options, presets, models, GPUs.

Below every other module (it imports only the quoting of ``strict_json``), so the data, the
generator, the solve facade and the command line all say it the same way.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

from .strict_json import quote

#: how close a known name must be to be suggested (difflib ratio); 0.5 lets "dq" suggest "dp"
CUTOFF = 0.5


def did_you_mean(word: str, known: Iterable[str]) -> str:
    """``"; did you mean 'x'?"`` when a known name is close to ``word``, else ``""``."""
    close = difflib.get_close_matches(str(word), list(known), n=1, cutoff=CUTOFF)
    return f"; did you mean {close[0]!r}?" if close else ""


def unknown_name(kind: str, word: str, known: Iterable[str]) -> str:
    """``unknown solver 'dq'; did you mean 'dp'? known: dp, cdynp, ...``."""
    known = list(known)
    return (f"unknown {kind} {quote(str(word))}{did_you_mean(word, known) or ';'} "
            f"known: {', '.join(known) if known else '(none)'}")
