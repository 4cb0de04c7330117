"""JSON <-> Instance and Plan, with every problem named by its JSON path.

The field rules are those of :data:`chainpipe.instance.RULES`; the JSON Schema
shipped beside this module (``schema/instance.schema.json``) says the same
thing for other tools, and a test keeps the two in step.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from . import strict_json
from .instance import (
    FORMAT,
    FORMATS,
    OPTIONAL,
    PARALLELISM_DEFAULTS,
    RULES,
    Datacenter,
    DeviceGroup,
    Instance,
    InstanceError,
    Layer,
    Link,
    Model,
    Parallelism,
    Training,
    _fmt,
    default_objective,
    field_problem,
    json_kind,
    name_rule,
    node_problems,
    optimizer_problem,
)
from .plan import Plan
from .strict_json import quote, shorten

_SHA256 = re.compile(r"[0-9a-f]{64}")
SCHEMA_PATH = Path(__file__).with_name("schema") / "instance.schema.json"
#: what to do instead with the files of ``chainpipe split``
_SPLIT_HINTS = {
    "chainpipe-public/1": " (a public.json of `chainpipe split`: solve it with its DCs' agents, "
                          "`--solver cdynp --agents AGENTS --tls-ca ... --tls-cert ... "
                          "--tls-key ...`)",
    "chainpipe-private/1": " (a DC's private file of `chainpipe split`: serve it with "
                           "`chainpipe agent serve`)",
}
TOP_KEYS = ("format", "name", "model", "training", "datacenters", "links")
_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}\Z")


def load_json(path: str | os.PathLike) -> Any:
    """Read a strict JSON file: UTF-8 (a byte order mark is skipped), RFC 8259 only.

    Parameters
    ----------
    path : str or os.PathLike
        The file.

    Returns
    -------
    object
        The parsed value. A number too large for a double is kept as a
        :class:`~chainpipe.strict_json.OverflowNumber` (a non-finite float that
        remembers what was written and where), for validation to refuse by field.

    Raises
    ------
    InstanceError
        One line ``PATH: cannot read file: REASON`` or
        ``PATH: invalid JSON: line L, column C: WHAT`` per problem: not UTF-8,
        bad syntax, ``NaN``/``Infinity``, a key twice in one object, nesting
        deeper than :data:`~chainpipe.strict_json.MAX_NESTING`.

    Examples
    --------
    >>> load_json("instances/small/small-01-tiny.json")["format"]
    'chainpipe-instance/1'
    """
    try:
        data = Path(path).read_bytes()
    except (OSError, ValueError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise InstanceError([f"{path}: cannot read file: {reason}"]) from None
    try:
        return strict_json.decode(data)
    except strict_json.JSONTextError as exc:
        raise InstanceError([f"{path}: invalid JSON: {p}" for p in exc.problems]) from None


# --------------------------------------------------------------------------- parsing
def _at(path: str, key: Any) -> str:
    """The JSON path of ``key`` inside ``path``: ``a.b`` for a plain key, else ``a['odd key']``."""
    if isinstance(key, str) and _PLAIN_KEY.match(key):
        return f"{path}.{key}" if path else key
    return f"{path}[{_fmt(key) if isinstance(key, str) else shorten(repr(key))}]"


class Problems:
    """Problems found so far, each ``"json.path: what is wrong"``, in document order."""

    def __init__(self) -> None:
        self.problems: list[str] = []

    def add(self, path: str, msg: str) -> None:
        self.problems.append(f"{path}: {msg}")

    def obj(self, data: Any, path: str, keys: tuple[str, ...]) -> dict | None:
        """``data`` if it is an object; notes missing and unknown keys."""
        if not isinstance(data, dict):
            self.add(path or "(instance)", f"must be an object, got {json_kind(data)}")
            return None
        for key in keys:
            if key not in data:
                self.add(_at(path, key), "missing field")
        for key in data:
            if key not in keys:
                self.add(_at(path, key), "unknown field")
        return data

    def obj_optional(self, data: Any, path: str, required: tuple[str, ...],
                     optional: tuple[str, ...]) -> dict | None:
        """:meth:`obj` with keys that may be left out."""
        if not isinstance(data, dict):
            return self.obj(data, path, required)
        missing = {k: None for k in optional if k not in data}
        d = self.obj({**data, **missing}, path, required + optional)
        return None if d is None else data

    def fields(self, kind: str, data: dict, path: str) -> dict:
        """Apply the rules of ``kind`` (optional fields too) to the fields present;
        returns the good ones."""
        good = {}
        for key, rule in {**RULES[kind], **OPTIONAL.get(kind, {})}.items():
            if key in data:
                msg = rule(data[key])
                if msg:
                    self.problems.append(field_problem(_at(path, key), msg))
                else:
                    good[key] = data[key]
        return good

    def checked(self, kind: str, data: Any, path: str,
                extra: tuple[str, ...] = ()) -> tuple[dict, bool]:
        """The good fields of a flat record of ``kind`` (empty if it is no object), and
        whether the record is whole: every required field present, every present one good.
        ``extra`` keys are allowed and left to the caller."""
        optional = tuple(OPTIONAL.get(kind, {})) + extra
        d = self.obj_optional(data, path, tuple(RULES[kind]), optional)
        if d is None:
            return {}, False
        before = len(self.problems)
        good = self.fields(kind, d, path)
        complete = all(k in good for k in RULES[kind])
        return good, complete and len(self.problems) == before

    def record(self, kind: str, data: Any, path: str, extra: tuple[str, ...] = ()) -> dict | None:
        """The fields of a flat record of ``kind`` when it is whole (:meth:`checked`), else
        None."""
        good, whole = self.checked(kind, data, path, extra)
        return good if whole else None

    def items(self, data: dict, key: str, path: str, min_len: int = 0) -> list:
        """The array at ``data[key]`` (empty if absent or not an array, which is noted)."""
        if key not in data:
            return []
        val = data[key]
        if not isinstance(val, list):
            self.add(_at(path, key), f"must be an array, got {json_kind(val)}")
            return []
        if len(val) < min_len:
            self.add(_at(path, key), "must not be empty" if min_len == 1
                     else f"must hold at least {min_len} entries")
        return val

    def name(self, data: dict, path: str, key: str = "name") -> bool:
        """Check the name at ``data[key]`` if present; whether it is a good name."""
        if key not in data:
            return False
        if msg := name_rule(data[key]):
            self.add(_at(path, key), msg)
            return False
        return True

    def unique(self, entries: list, key: str, path: str, what: str) -> bool:
        """Note every good name at ``entries[i][key]`` seen before; whether none was."""
        seen: dict[str, int] = {}
        unique = True
        for i, entry in enumerate(entries):
            n = entry.get(key) if isinstance(entry, dict) else None
            if name_rule(n):
                continue
            if n in seen:
                unique = False
                self.add(f"{path}[{i}].{key}",
                         f"duplicate {what} {_fmt(n)} (also {path.rpartition('.')[2]}[{seen[n]}])")
            seen.setdefault(n, i)
        return unique


def link_from_dict(c: Problems, data: Any, path: str) -> Link | None:
    """A :class:`Link` from its JSON object at ``path``, or ``None`` with problems added to ``c``."""
    good = c.record("link", data, path)
    return Link(**good) if good else None


def _model(c: Problems, top: dict) -> Model | None:
    """``model``: its name and every layer."""
    if "model" not in top:
        return None
    m = c.obj(top["model"], "model", ("name", "layers"))
    if m is None:
        return None
    named = c.name(m, "model")
    layers = [c.record("layer", ly, f"model.layers[{i}]")
              for i, ly in enumerate(c.items(m, "layers", "model", min_len=1))]
    if not (named and layers and all(layers)):
        return None
    return Model(m["name"], tuple(Layer(**good) for good in layers))


def _parallelism(c: Problems, data: Any, path: str) -> Parallelism | None:
    """``training.parallelism``: each key optional, with its default on its own."""
    d = c.obj_optional(data, path, (), tuple(RULES["parallelism"]) + tuple(OPTIONAL["parallelism"]))
    if d is None:
        return None
    before = len(c.problems)
    good = c.fields("parallelism", d, path)
    if len(c.problems) != before:
        return None
    return Parallelism(**{**PARALLELISM_DEFAULTS, **good})


def _training(c: Problems, top: dict) -> Training | None:
    """``training``, its version-2 and -3 fields with their defaults (the objective's
    depends on the file's ``format``: :func:`~chainpipe.instance.default_objective`)."""
    if "training" not in top:
        return None
    raw = top["training"]
    good, whole = c.checked("training", raw, "training", extra=("parallelism",))
    # the rule between two fields, judged whenever both are good on their own
    if "bytes_per_param" in good and "optimizer_bytes_per_param" in good and (
            msg := optimizer_problem(good["bytes_per_param"],
                                     good["optimizer_bytes_per_param"])):
        c.problems.append(f"training.{msg}")
        whole = False
    par = _parallelism(c, raw["parallelism"], "training.parallelism") \
        if isinstance(raw, dict) and "parallelism" in raw else Parallelism()
    if not whole or par is None:
        return None
    good.setdefault("objective", default_objective(top.get("format")))
    return Training(**good, parallelism=par)


def _device_group(c: Problems, data: Any, path: str) -> DeviceGroup | None:
    """One device group; its node rules named by path."""
    good, whole = c.checked("device_group", data, path)
    # the rules between fields (whole nodes, a node bandwidth), judged on the good ones
    dpn = good.get("devices_per_node", 1 if isinstance(data, dict)
                   and "devices_per_node" not in data else None)
    between = node_problems(good.get("count"), dpn,
                            isinstance(data, dict) and "node_bandwidth_bytes_per_s" in data)
    c.problems.extend(f"{path}.{p}" for p in between)
    if not whole or between:
        return None
    return DeviceGroup(**good)


def _datacenter(c: Problems, data: Any, path: str) -> Datacenter | None:
    """One datacenter: name, device groups (types unique) and its link."""
    d = c.obj(data, path, ("name", "devices", "link"))
    if d is None:
        return None
    named = c.name(d, path)
    raw = c.items(d, "devices", path, min_len=1)
    groups = [_device_group(c, grp, f"{path}.devices[{g}]") for g, grp in enumerate(raw)]
    unique = c.unique(raw, "type", f"{path}.devices", "device type")
    link = link_from_dict(c, d["link"], f"{path}.link") if "link" in d else None
    if not (named and groups and all(groups) and unique and link):
        return None
    return Datacenter(d["name"], tuple(groups), link)


def _datacenters(c: Problems, top: dict) -> list[Datacenter | None]:
    raw = c.items(top, "datacenters", "", min_len=1)
    dcs = [_datacenter(c, dc, f"datacenters[{k}]") for k, dc in enumerate(raw)]
    c.unique(raw, "name", "datacenters", "datacenter name")
    return dcs


def _links(c: Problems, top: dict) -> list[Link | None]:
    """``links``, whose count is judged only against a datacenter list that exists."""
    if "links" not in top:
        return []
    raw = c.items(top, "links", "")
    dcs = top.get("datacenters")
    want = max(len(dcs) - 1, 0) if isinstance(dcs, list) else None
    if isinstance(top["links"], list) and want is not None and len(raw) != want:
        c.add("links", f"must have exactly {want} entries (one per pair of neighbouring "
                       f"datacenters), got {len(raw)}")
    return [link_from_dict(c, lk, f"links[{j}]") for j, lk in enumerate(raw)]


def instance_from_dict(data: Any) -> Instance:
    """Build an :class:`Instance` from parsed JSON, reporting every problem at once.

    Parameters
    ----------
    data : object
        The parsed ``chainpipe-instance/3`` (or ``/2``, ``/1``) document, as
        :func:`load_json` or :func:`json.loads` returns it: an object with
        ``format``, ``name``, ``model``, ``training``, ``datacenters`` and ``links``;
        the fields left out take their defaults (``training.objective``: ``"period"``
        in a ``/3`` file, ``"classic"`` in ``/1`` and ``/2``).

    Returns
    -------
    Instance
        The validated, frozen instance.

    Raises
    ------
    InstanceError
        Whatever breaks the format; ``problems`` holds one line per problem,
        ``"json.path: what is wrong"`` (``(instance)`` for the top level),
        quoting at most ~80 characters of any value.

    See Also
    --------
    read : the same from a file, each line prefixed with its path.
    instance_to_dict : the inverse.

    Examples
    --------
    >>> data = load_json("instances/small/small-01-tiny.json")
    >>> instance_from_dict(data).num_datacenters
    3
    >>> data["training"]["microbatches"] = 0
    >>> instance_from_dict(data)
    Traceback (most recent call last):
    ...
    chainpipe.instance.InstanceError: training.microbatches: must be an integer >= 1, got 0
    """
    c = Problems()
    top = c.obj(data, "", TOP_KEYS)
    if top is None:
        raise InstanceError(c.problems)
    if "format" in top and top["format"] not in FORMATS:
        hint = _SPLIT_HINTS.get(top["format"], "") if isinstance(top["format"], str) else ""
        c.add("format", f"must be 'chainpipe-instance/N' with N = 1, 2 or 3, got "
                        f"{_fmt(top['format'])}{hint}")
    c.name(top, "")
    model = _model(c, top)
    training = _training(c, top)
    dcs = _datacenters(c, top)
    links = _links(c, top)
    if c.problems:
        raise InstanceError(c.problems)
    return Instance(name=top["name"], model=model, training=training,
                    datacenters=tuple(dcs), links=tuple(links))


def instance_to_dict(instance: Instance) -> dict:
    """The JSON document of an instance, field for field (the inverse of :func:`instance_from_dict`).

    Parameters
    ----------
    instance : Instance
        Any valid instance.

    Returns
    -------
    dict
        A ``chainpipe-instance/3`` document with every field explicit (defaults
        written out, ``objective`` too, so an instance read from a ``/1`` or ``/2``
        file keeps its ``"classic"`` objective; ``node_bandwidth_bytes_per_s``,
        ``microbatch_size`` and ``weight_grad_share`` only where given), of plain dicts, lists, str, int and float.

    Examples
    --------
    >>> inst = read("instances/small/small-01-tiny.json")
    >>> instance_from_dict(instance_to_dict(inst)) == inst
    True
    """
    return {
        "format": FORMAT,
        "name": instance.name,
        "model": {
            "name": instance.model.name,
            "layers": [
                {
                    "name": ly.name,
                    "fwd_flop": ly.fwd_flop,
                    "bwd_flop": ly.bwd_flop,
                    "params": ly.params,
                    "activation_bytes": ly.activation_bytes,
                    "output_bytes": ly.output_bytes,
                    "tp_allreduce_bytes": ly.tp_allreduce_bytes,
                    **({} if ly.weight_grad_share is None
                       else {"weight_grad_share": ly.weight_grad_share}),
                }
                for ly in instance.layers
            ],
        },
        "training": {
            "microbatches": instance.training.microbatches,
            "schedule": instance.training.schedule,
            "bytes_per_param": instance.training.bytes_per_param,
            "gradient_bytes_per_param": instance.training.gradient_bytes_per_param,
            "optimizer_bytes_per_param": instance.training.optimizer_bytes_per_param,
            **({} if instance.training.microbatch_size is None
               else {"microbatch_size": instance.training.microbatch_size}),
            "objective": instance.training.objective,
            "pipeline_sync_period": instance.training.pipeline_sync_period,
            "parallelism": {
                "data_parallel": list(instance.parallelism.data_parallel),
                "tensor_parallel": list(instance.parallelism.tensor_parallel),
                "zero": instance.parallelism.zero,
                "pipelines": list(instance.parallelism.pipelines),
            },
        },
        "datacenters": [
            {
                "name": dc.name,
                "devices": [
                    {
                        "type": g.type,
                        "count": g.count,
                        "flop_per_s": g.flop_per_s,
                        "memory_bytes": g.memory_bytes,
                        "devices_per_node": g.devices_per_node,
                        **({} if g.node_bandwidth_bytes_per_s is None else
                           {"node_bandwidth_bytes_per_s": g.node_bandwidth_bytes_per_s}),
                    }
                    for g in dc.devices
                ],
                "link": _link_dict(dc.link),
            }
            for dc in instance.datacenters
        ],
        "links": [_link_dict(lk) for lk in instance.links],
    }


def _link_dict(link: Link) -> dict:
    return {"bandwidth_bytes_per_s": link.bandwidth_bytes_per_s, "latency_s": link.latency_s}


# --------------------------------------------------------------------------- files
def read(path: str | os.PathLike) -> Instance:
    """Read and validate an instance file.

    Parameters
    ----------
    path : str or os.PathLike
        A ``chainpipe-instance/3``, ``/2`` or ``/1`` JSON file (UTF-8, a byte order mark
        is skipped).

    Returns
    -------
    Instance
        The validated instance.

    Raises
    ------
    InstanceError
        If the file cannot be read, is not strict JSON or breaks the format;
        ``problems`` holds every problem, one line each, starting with
        ``path: `` and naming a JSON path or a line and column.

    Examples
    --------
    >>> read("instances/small/small-01-tiny.json").num_layers
    14
    """
    data = load_json(path)  # its problems already name the file
    try:
        return instance_from_dict(data)
    except InstanceError as exc:
        raise InstanceError([f"{path}: {p}" for p in exc.problems]) from None


def atomic_write(path: str | os.PathLike, write) -> Path:
    """Call ``write(tmp)`` on a new temporary file, then put its content at ``path``.

    The one way chainpipe writes a file. What ``path`` is decides how:

    - a new name or a regular file: the temporary file is made beside it and renamed
      over it, so readers see the old file or the whole new one, never half a file.
      An existing file keeps its permissions; a new one gets ``0666`` less the umask.
    - a symbolic link: the same, at the file the link resolves to; the link stays.
    - a device or a FIFO (``/dev/null``, ``/dev/stdout``, a named pipe): the content
      is made in full first, then written into it as ``tee`` would; it is never replaced.
    - a directory or a socket: :class:`OSError`, nothing written.

    The temporary file has a random name and is created anew (``O_EXCL``), never
    through a link planted in its place; it is removed when ``write`` fails.
    Missing parent directories are created.

    Parameters
    ----------
    path : path
        The target file.
    write : callable
        Writes the content to the :class:`~pathlib.Path` it is given (a regular file).

    Returns
    -------
    Path
        ``path``.

    Raises
    ------
    OSError
        If ``path`` is a directory or a socket, or cannot be written; a file that was
        there is left intact.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        mode = os.stat(path).st_mode  # through links
    except FileNotFoundError:  # a new name, or a link to one
        mode = None
    if mode is None or stat.S_ISREG(mode):
        _replace(Path(os.path.realpath(path)), mode, write)
    elif stat.S_ISDIR(mode) or stat.S_ISSOCK(mode):
        kind = "a directory" if stat.S_ISDIR(mode) else "a socket"
        raise OSError(errno.EISDIR if stat.S_ISDIR(mode) else errno.ENXIO,
                      f"is {kind}, not a file", str(path))
    else:
        _write_into(path, write)
    return path


def atomic_write_directory(path: str | os.PathLike, write, names: Iterable[str]) -> Path:
    """Call ``write(tmp)`` on a new directory beside ``path``, then swap it in for ``path``.

    The one way chainpipe writes a set of files that belong together (``simulate --out``):
    readers find the old set whole or the new set whole, never files of two runs side
    by side. The new directory is filled in full, then the old one (if any) is renamed
    away, the new one renamed in and the old one removed. An interruption before the
    swap leaves the old set as it was (and a hidden ``.NAME.*.tmp`` directory beside
    it); one between the two renames leaves no directory at ``path``, never a mixed one.
    A link to a directory is followed (the link stays); an existing directory keeps its
    permissions, a new one gets ``0777`` less the umask; missing parents are created.

    Parameters
    ----------
    path : path
        The target directory.
    write : callable
        Writes the set into the (empty) :class:`~pathlib.Path` it is given.
    names : iterable of str
        The entries a set consists of: an existing directory holding anything else is
        refused rather than replaced.

    Returns
    -------
    Path
        ``path``.

    Raises
    ------
    OSError
        ``path`` is a file, or a directory holding entries not among ``names``, or
        cannot be written; the old set is left intact.
    """
    path = Path(path)
    target = Path(os.path.realpath(path))
    mode = os.stat(target).st_mode if target.exists() else None
    if mode is not None and not stat.S_ISDIR(mode):
        raise NotADirectoryError(errno.ENOTDIR, "is a file, not a directory", str(path))
    target.parent.mkdir(parents=True, exist_ok=True)
    new = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp"))
    try:
        os.chmod(new, 0o777 & ~_umask() if mode is None else stat.S_IMODE(mode))
        write(new)
        _swap_in(new, target, names)
    except BaseException:
        shutil.rmtree(new, ignore_errors=True)
        raise
    return path


def _swap_in(new: Path, target: Path, names: Iterable[str]) -> None:
    """Rename the directory ``new`` to ``target``; an old ``target`` (holding only ``names``)
    is moved aside first and removed after, or put back if the rename fails."""
    from .paths import foreign_entries

    if not os.path.lexists(target):
        os.rename(new, target)
        return
    if extra := foreign_entries(target, names):
        raise FileExistsError(errno.EEXIST, f"holds {extra[0]!r}, which is not one of the "
                              "files written there; not replacing it", str(target))
    aside = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.", suffix=".old"))
    try:
        os.rename(target, aside / target.name)
    except BaseException:
        aside.rmdir()
        raise
    try:
        os.rename(new, target)
    except BaseException:
        os.rename(aside / target.name, target)
        aside.rmdir()
        raise
    shutil.rmtree(aside, ignore_errors=True)


def _staged(directory: str | os.PathLike, name: str, mode: int, write) -> Path:
    """A new file of ``mode`` in ``directory``, with a random name, filled by ``write``.

    Created with ``O_EXCL`` (:func:`tempfile.mkstemp`): never a file that was there, nor
    the target of a planted link. Removed again if ``write`` fails.
    """
    fd, tmp_name = tempfile.mkstemp(dir=directory, prefix=f".{name}.", suffix=".tmp")
    tmp = Path(tmp_name)
    os.close(fd)
    try:
        os.chmod(tmp, mode)
        write(tmp)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return tmp


def _replace(target: Path, mode: int | None, write) -> None:
    """Stage the content beside ``target`` (keeping ``mode``, or the umask's for a new
    file), then rename it over ``target``."""
    keep = 0o666 & ~_umask() if mode is None else stat.S_IMODE(mode)
    tmp = _staged(target.parent, target.name, keep, write)
    try:
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _write_into(path: Path, write) -> None:
    """Stage the content in the temporary directory, then copy it into the device or FIFO
    ``path``, opened for writing only (never created, truncated or replaced)."""
    tmp = _staged(tempfile.gettempdir(), path.name, 0o600, write)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NOCTTY)
        with open(fd, "wb") as sink, open(tmp, "rb") as source:
            if stat.S_ISREG(os.fstat(fd).st_mode):  # replaced by a file since it was looked at
                raise OSError(errno.EEXIST, "became a regular file while being written",
                              str(path))
            shutil.copyfileobj(source, sink)
    finally:
        tmp.unlink(missing_ok=True)


def _umask() -> int:
    """The process's umask (read by setting it, and setting it back at once)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_json(data: Any, path: str | os.PathLike) -> None:
    """Write JSON atomically (:func:`atomic_write`); non-finite numbers are refused first."""
    text = json.dumps(data, indent=1, allow_nan=False) + "\n"  # fails before any file exists
    atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def write(instance: Instance, path: str | os.PathLike) -> None:
    """Write an instance as JSON, atomically (never a half-written file).

    Parameters
    ----------
    instance : Instance
        The instance.
    path : str or os.PathLike
        The file; missing parent directories are created, an existing file replaced.

    Raises
    ------
    OSError
        If the file cannot be written; any previous file at ``path`` is left intact.
    """
    write_json(instance_to_dict(instance), path)


def canonical_dict(instance: Instance) -> dict:
    """The instance's document in the oldest format that states it: what its digest hashes.

    An instance that a version-2 document expresses (objective ``classic``, one pipeline,
    ``pipeline_sync_period`` 1) is its ``chainpipe-instance/2`` document, exactly as
    chainpipe wrote it before version 3, so digests (and the plans that name them) stay
    valid across the version; any other instance is its :func:`instance_to_dict`.
    """
    doc = instance_to_dict(instance)
    training = instance.training
    if training.classic and training.parallelism.pipelines == (1,) \
            and training.pipeline_sync_period == 1:
        doc["format"] = "chainpipe-instance/2"
        for key in ("objective", "pipeline_sync_period"):
            del doc["training"][key]
        del doc["training"]["parallelism"]["pipelines"]
    return doc


def instance_digest(instance: Instance) -> str:
    """The SHA-256 (hex) of an instance's canonical JSON: what a plan names its instance by.

    The canonical JSON is :func:`canonical_dict` dumped with sorted keys, no spaces and
    UTF-8 text (``json.dumps(obj, sort_keys=True, separators=(",", ":"),
    ensure_ascii=False)``), so a file and its rewrite by chainpipe (a version-1 file and
    its version-3 form, a file with defaults left out) have one digest, and a
    version-2 instance keeps the digest it had before version 3.
    """
    text = json.dumps(canonical_dict(instance), sort_keys=True, separators=(",", ":"),
                      ensure_ascii=False, allow_nan=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def plan_origin(instance: Instance) -> dict:
    """``{"name": ..., "sha256": ...}``: the ``instance`` block a plan file carries."""
    return {"name": instance.name, "sha256": instance_digest(instance)}


def plan_document(plan: Plan, origin: dict | None = None) -> dict:
    """A plan as its file holds it: ``{"instance": origin, "stages": [...]}``."""
    return {**({"instance": origin} if origin else {}), **plan.to_dict()}


def _origin_of(data: Any, where: str) -> dict | None:
    """The ``instance`` block of a plan object, checked (``None`` when there is none)."""
    if not isinstance(data, dict) or "instance" not in data:
        return None
    origin = data["instance"]
    pre = f"{where}instance"
    if not isinstance(origin, dict):
        raise InstanceError([f"{pre}: must be an object {{\"name\": ..., \"sha256\": ...}}, "
                             f"got {json_kind(origin)}"])
    problems = [f"{pre}.{k}: unknown field" for k in origin if k not in ("name", "sha256")]
    if msg := name_rule(origin.get("name")):
        problems.append(f"{pre}.name: {msg}")
    sha = origin.get("sha256")
    if sha is not None and not (isinstance(sha, str) and _SHA256.fullmatch(sha)):
        problems.append(f"{pre}.sha256: must be 64 lower-case hexadecimal digits, got {_fmt(sha)}")
    if problems:
        raise InstanceError(problems)
    return origin


def read_plan_file(path: str | os.PathLike) -> tuple[Plan, dict | None]:
    """A plan file's plan and the instance it names (``None`` when it names none).

    Reads what :func:`read_plan` reads; see :func:`check_plan_origin` for the check.
    """
    data = load_json(path)
    try:
        # accept a plan file or a whole result object that carries one
        if isinstance(data, dict) and "plan" in data and "stages" not in data \
                and "pipelines" not in data:
            if data["plan"] is None:
                raise InstanceError(["plan: the result holds no plan"])
            return Plan.from_dict(data["plan"], "plan"), _origin_of(data["plan"], "plan.")
        return Plan.from_dict(data), _origin_of(data, "")
    except InstanceError as exc:
        raise InstanceError([f"{path}: {p}" for p in exc.problems]) from None


def read_plan(path: str | os.PathLike) -> Plan:
    """Read a plan file, or the plan inside a result file that ``solve --format json`` wrote.

    Parameters
    ----------
    path : str or os.PathLike
        ``{"stages": [{"layers": [start, end], "device": "dc/type/i"}, ...]}`` or
        ``{"pipelines": [{"microbatches": M_p, "stages": [...]}, ...]}`` (optionally
        with the ``instance`` it was written for) or a result object with a ``plan``
        field.

    Returns
    -------
    Plan
        The plan as written; whether it fits an instance is for
        :func:`chainpipe.evaluate` to say.

    Raises
    ------
    InstanceError
        If the file cannot be read, is not strict JSON or is not a plan (a
        result without a plan included); one line per problem, each starting
        with ``path: ``.
    """
    return read_plan_file(path)[0]


def check_plan_origin(origin: dict | None, instance: Instance, plan_path, *,
                      force: bool = False) -> list[str]:
    """Whether a plan file was written for ``instance``; the warning lines to print.

    Parameters
    ----------
    origin : dict or None
        The plan file's ``instance`` block (:func:`read_plan_file`).
    instance : Instance
        The instance the plan is about to be used with.
    plan_path : path
        The plan file, for the messages.
    force : bool, default False
        Use a plan written for another instance anyway (one warning line instead of
        the error).

    Returns
    -------
    list of str
        Warnings: the plan names no instance (written by hand, or by an older chainpipe),
        names it without a digest, or was forced.

    Raises
    ------
    InstanceError
        The plan names another instance (by digest, or by name when it carries no
        digest), and ``force`` is false.
    """
    if origin is None:
        return [f"warning: {plan_path} names no instance (written by hand or by an older "
                f"chainpipe): not checked against {instance.name}"]
    digest = instance_digest(instance)
    sha = origin.get("sha256")
    if sha == digest:
        return []
    if sha is None and origin["name"] == instance.name:
        return [
            f"warning: {plan_path} names instance {quote(origin['name'])} without its digest: "
            f"only the name is checked"]
    theirs = f"{quote(origin['name'])}" + (f" (sha256 {sha[:12]}...)" if sha else "")
    line = (f"{plan_path}: the plan was written for instance {theirs}, not {quote(instance.name)} "
            f"(sha256 {digest[:12]}...)")
    if not force:
        raise InstanceError([f"{line}; --force uses it anyway"])
    return [f"warning: {line}; used anyway (--force)"]


def read_plan_for(path: str | os.PathLike, instance: Instance, *,
                  force: bool = False) -> tuple[Plan, list[str]]:
    """Read a plan file to use with ``instance``: the plan and the warning lines to show.

    :func:`read_plan_file`, then :func:`check_plan_origin` (a plan written for another
    instance raises :class:`InstanceError` unless ``force``).
    """
    plan, origin = read_plan_file(path)
    return plan, check_plan_origin(origin, instance, path, force=force)


def write_plan(plan: Plan, path: str | os.PathLike, instance: Instance | None = None) -> None:
    """Write a plan as JSON in the form :func:`read_plan` reads.

    Parameters
    ----------
    plan : Plan
        The plan.
    path : str or os.PathLike
        The file, written as :func:`write` writes (atomically, parents created);
        an ``OSError`` leaves any previous file intact.
    instance : Instance, optional
        The instance the plan is for: the file names it (``"instance": {"name": ...,
        "sha256": ...}``, :func:`plan_origin`) so that it is not used with another.
    """
    write_json(plan_document(plan, plan_origin(instance) if instance is not None else None), path)


def load_schema() -> dict:
    """The JSON Schema (draft 2020-12) of the instance format shipped with chainpipe.

    It describes ``chainpipe-instance/3`` and accepts ``/1`` and ``/2`` files too (their
    ``format`` is one of :data:`~chainpipe.instance.FORMATS`), with every field,
    its bounds and its default. The rules JSON Schema cannot state (the count of
    ``links``, unique names, ``devices_per_node`` dividing ``count``,
    ``optimizer_bytes_per_param <= bytes_per_param``, integer literals, finiteness)
    are chainpipe's own; ``tests/test_io.py`` lists them and checks the schema
    refuses every other file chainpipe refuses.

    Returns
    -------
    dict
        The parsed schema.
    """
    return json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))


