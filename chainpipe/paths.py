"""Files a command reads and writes: finding instance files, never writing over an input.

Every command that writes a file checks its outputs against its inputs with
:func:`refuse_overwrite` before it does any work. Inputs are the files the
command actually reads (a directory form such as ``--model-config DIR`` is
passed as the file it stands for, ``DIR/config.json``), and every path is
compared after resolving symbolic links (hard links too, when both exist), so
that ``chainpipe solve X --plan-out X`` (or any other output pointed at an
input, through a link or not) is refused with one line instead of destroying
the input. The same check refuses an output file that is a directory or a
socket, and an output directory that is a file.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from pathlib import Path

from .instance import InstanceError

#: name of the file that describes a committed instance set; never an instance
MANIFEST = "manifest.json"


def real_path(path: str | os.PathLike) -> Path:
    """``path`` absolute, with every symbolic link resolved.

    A missing part, or a loop of links, is left as it is (never an exception): a path
    that cannot be resolved names no file another path could also name.
    """
    return Path(os.path.realpath(path))


def same_file(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    """Whether ``a`` and ``b`` name the same file, after resolving links (and hard links)."""
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist (yet), or cannot be reached
        return real_path(a) == real_path(b)


def inside(path: str | os.PathLike, directory: str | os.PathLike) -> bool:
    """Whether ``path`` is ``directory`` or lies below it, after resolving links."""
    p, d = real_path(path), real_path(directory)
    return p == d or d in p.parents


def file_problem(option: str, path: str | os.PathLike) -> str | None:
    """Why ``path`` cannot be an output file of ``option``, or None.

    A new name, a regular file, a link to one, a device or a FIFO can be written
    (:func:`chainpipe.io.atomic_write` says how); a directory or a socket cannot.
    """
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return None  # a new name (or a link to one)
    except OSError as exc:  # a loop of links, a file where a directory should be, ...
        return f"{option}: {path}: {exc.strerror}"
    if stat.S_ISDIR(mode):
        return f"{option}: {path} is a directory; give a file name"
    if stat.S_ISSOCK(mode):
        return f"{option}: {path} is a socket; give a file name"
    return None


def directory_problem(option: str, path: str | os.PathLike) -> str | None:
    """Why ``path`` cannot be an output directory of ``option`` (it is a file), or None."""
    if os.path.lexists(path) and not os.path.isdir(path):
        return f"{option}: {path} is a file; give a directory"
    return None


def _file_problems(option: str, out: str | os.PathLike, inputs: list[Path]) -> list[str]:
    """Why ``out`` cannot be the output file of ``option``: each input it is, else its kind."""
    clashes = [f"{option}: {out} is an input of this command; refusing to write over it"
               for src in inputs if same_file(out, src)]
    problem = file_problem(option, out)
    return clashes or ([problem] if problem else [])


def _directory_problems(option: str, out: str | os.PathLike, inputs: list[Path]) -> list[str]:
    """Why ``out`` cannot be the output directory of ``option``: each input it holds, else
    its kind."""
    clashes = [f"{option}: {out} holds the input {src}; refusing to write into it"
               for src in inputs if inside(src, out)]
    problem = directory_problem(option, out)
    return clashes or ([problem] if problem else [])


def refuse_overwrite(outputs: dict[str, str | os.PathLike | None],
                     inputs: Iterable[str | os.PathLike],
                     directories: dict[str, str | os.PathLike | None] | None = None) -> None:
    """Raise :class:`InstanceError` if an output would write over an input, or cannot be one.

    Parameters
    ----------
    outputs : dict
        ``{option name: file path}`` of files the command will write (``None`` skipped).
        A directory or a socket is refused.
    inputs : iterable of path
        The files the command reads: each as the reader opens it (``DIR/config.json``
        for ``--model-config DIR``, a set's instance files for its directory).
    directories : dict, optional
        ``{option name: directory}`` the command writes into: an input inside one is
        refused, and so is an existing file that is not a directory.

    Raises
    ------
    InstanceError
        One problem per collision or unusable output, naming the option.
    """
    unique: dict[Path, Path] = {}
    for src in inputs:  # an input named twice is one input
        unique.setdefault(real_path(src), Path(src))
    inputs = list(unique.values())
    problems = []
    for option, out in outputs.items():
        if out is not None:
            problems += _file_problems(option, out, inputs)
    for option, out in (directories or {}).items():
        if out is not None:
            problems += _directory_problems(option, out, inputs)
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


def foreign_entries(directory: str | os.PathLike, names: Iterable[str]) -> list[str]:
    """The entries of ``directory`` other than ``names``, sorted; none for a missing directory.

    What a command that replaces a directory whole (``simulate --out``) would destroy
    beside its own files: it refuses such a directory instead.
    """
    try:
        return sorted(set(os.listdir(directory)) - set(names))
    except (FileNotFoundError, NotADirectoryError):
        return []
