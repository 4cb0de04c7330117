"""Files a command reads and writes: finding instance files, never writing over an input.

Every command that writes a file checks its outputs against its inputs with
:func:`refuse_overwrite` before it does any work, comparing paths after
resolving symbolic links, so that ``chainpipe solve X --plan-out X`` (or any
other output pointed at an input) is refused with one line instead of
destroying the input.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from .instance import InstanceError

#: name of the file that describes a committed instance set; never an instance
MANIFEST = "manifest.json"


def same_file(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    """Whether ``a`` and ``b`` name the same file, after resolving links (and hard links)."""
    pa, pb = Path(a), Path(b)
    try:
        if pa.exists() and pb.exists():
            return os.path.samefile(pa, pb)
    except OSError:
        pass
    return pa.resolve() == pb.resolve()


def inside(path: str | os.PathLike, directory: str | os.PathLike) -> bool:
    """Whether ``path`` is ``directory`` or lies below it, after resolving links."""
    p, d = Path(path).resolve(), Path(directory).resolve()
    return p == d or d in p.parents


def refuse_overwrite(outputs: dict[str, str | os.PathLike | None],
                     inputs: Iterable[str | os.PathLike],
                     directories: dict[str, str | os.PathLike | None] | None = None) -> None:
    """Raise :class:`InstanceError` if an output would write over an input.

    Parameters
    ----------
    outputs : dict
        ``{option name: file path}`` of files the command will write (``None`` skipped).
    inputs : iterable of path
        Files the command reads.
    directories : dict, optional
        ``{option name: directory}`` the command writes into: an input inside one is refused.

    Raises
    ------
    InstanceError
        One problem per collision, naming the option and the input.
    """
    inputs = [Path(p) for p in inputs]
    problems = []
    for option, out in outputs.items():
        if out is None:
            continue
        for src in inputs:
            if same_file(out, src):
                problems.append(f"{option}: {out} is an input of this command; "
                                f"refusing to write over it")
    for option, out in (directories or {}).items():
        if out is None:
            continue
        for src in inputs:
            if inside(src, out):
                problems.append(f"{option}: {out} holds the input {src}; "
                                f"refusing to write into it")
    if problems:
        raise InstanceError(problems)


def instance_files(arguments: Iterable[str | os.PathLike]) -> list[Path]:
    """The instance files named by command-line arguments, in order, without repeats.

    A file is taken as it is. A directory contributes its ``*.json`` files in
    name order, except the set's ``manifest.json`` (which describes the set and is
    not an instance). Nothing is read here: whether a file is a valid instance is
    for the reader to say.

    Raises
    ------
    InstanceError
        For an argument that does not exist, or a directory with no ``*.json`` file.
    """
    out: list[Path] = []
    seen: set[Path] = set()
    problems: list[str] = []
    for arg in arguments:
        path = Path(arg)
        if path.is_dir():
            found = [f for f in sorted(path.glob("*.json")) if f.name != MANIFEST]
            if not found:
                problems.append(f"{arg}: no instance files (*.json) in this directory")
        elif path.exists():
            found = [path]
        else:
            problems.append(f"{arg}: no such file or directory")
            continue
        for f in found:
            key = f.resolve()
            if key not in seen:
                seen.add(key)
                out.append(f)
    if problems:
        raise InstanceError(problems)
    return out
