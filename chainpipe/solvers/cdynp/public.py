"""The public part of an instance, and the split documents each DC is given.

Public to every DC: the model (with each layer's ``tp_allreduce_bytes``),
``training`` (with the gradient and optimizer bytes per parameter and the
``parallelism`` lists), the chain order (DC names) and the chain links between
neighbouring DCs. A :class:`PublicInstance` holds exactly that and nothing a DC
keeps private (device types, counts, rates, memory, node sizes and node
bandwidths, internal links).

The split documents are ``public.json`` (``chainpipe-public/1``) and one
``chainpipe-private/1`` document per DC holding its own datacenter record. Their
records are those of the instance format (version 2, every field written; a
document without the version-2 fields reads with their defaults, as a
version-1 instance does), written and validated by :mod:`chainpipe.io` (so a bad
document gets one line per problem, with the file and the JSON path).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path

import numpy as np

from ... import cost
from ...instance import (
    Datacenter,
    Instance,
    InstanceError,
    Link,
    Model,
    Training,
    name_rule,
)
from ...io import (
    Problems,
    instance_from_dict,
    instance_to_dict,
    link_from_dict,
    load_json,
    write_json,
)
from . import protocol

PUBLIC_FORMAT = "chainpipe-public/1"
#: the instance format a public file's training is read in (defaults of version 2)
V2_FORMAT = "chainpipe-instance/2"
PRIVATE_FORMAT = "chainpipe-private/1"
_PUBLIC_KEYS = ("format", "name", "model", "training", "datacenters", "links")
_PRIVATE_KEYS = ("format", "index", "datacenter")
#: the range views a :class:`PublicInstance` keeps (:meth:`PublicInstance.chain`); past it
#: they are dropped all at once (``v3-large-03``'s owner asks for 112 ranges and counts in
#: 285 range runs, ``v3-medium-02``'s for 40 in 76; an agent server keeps them across the
#: owners' solves)
CHAINS_KEPT = 4096


@dataclass(frozen=True)
class PublicInstance:
    name: str
    model: Model
    training: Training
    datacenter_names: tuple[str, ...]
    links: tuple[Link, ...]  # links[k] joins DC k and DC k + 1

    @classmethod
    def of(cls, instance: Instance) -> PublicInstance:
        return cls(instance.name, instance.model, instance.training,
                   tuple(dc.name for dc in instance.datacenters), instance.links)

    @property
    def num_layers(self) -> int:
        return len(self.model.layers)

    @property
    def num_datacenters(self) -> int:
        return len(self.datacenter_names)

    @property
    def microbatches(self) -> int:
        return self.training.microbatches

    @cached_property
    def position_cap(self) -> int:
        """Largest downstream stage count ``r`` worth telling apart.

        A stage with ``r`` stages after it sits at position ``p = r + 1``; its
        in-flight count (:func:`chainpipe.cost.in_flight`) only grows with ``p`` up
        to ``M``: ``r`` is capped where it reaches ``M`` (1F1B: ``M - 1``; GPipe: 0),
        and at ``L``.
        """
        L, M = self.num_layers, self.microbatches
        n = cost.in_flight(self.training.schedule, M, np.arange(1, L + 1))
        full = np.flatnonzero(n >= M)
        return int(full[0]) if len(full) else L

    def local(self, datacenter: Datacenter) -> Instance:
        """The one-DC instance of ``datacenter`` (the public model and training, its own
        record): what its agent plans with. Kept per record, so the agents of every run on
        this chain share one (an instance is checked as it is built)."""
        return kept(self, "_locals", datacenter, lambda: Instance(
            self.name, self.model, self.training, (datacenter,), ()))

    def expect(self, sender: int, receiver: int) -> protocol.Expect:
        """What a message from DC ``sender`` to its neighbour ``receiver`` must respect; a
        summary's ``bw`` is the bandwidth of a chain path from the receiver downstream
        (kept per pair: every run on this chain asks the same)."""
        return kept(self, "_expects", (sender, receiver),
                    lambda: self._expect(sender, receiver))

    def _expect(self, sender: int, receiver: int) -> protocol.Expect:
        bandwidths, bw = set(), float("inf")
        for link in self.links[receiver:]:
            bw = min(bw, link.bandwidth_bytes_per_s)
            bandwidths.add(bw)
        names = self.datacenter_names
        return protocol.Expect(names[sender], names[receiver], self.num_layers,
                               self.position_cap, frozenset(bandwidths), self.period)

    def chain(self, first: int, last: int, microbatches: int,
              objective: str | None = None) -> PublicInstance:
        """The range ``first..last`` of the chain as one pipeline of ``microbatches``
        (:func:`range_training`): what the range's agents plan in a range run of several
        pipelines (``docs/privacy.md``, "Several pipelines"), all of it public. Kept per
        range, count and objective (at most :data:`CHAINS_KEPT`), so that the runs of one
        range share one view and its DCs' one-DC instances (:meth:`local`: each checked as
        it is built; an agent server's range runs rebuilt both for every run)."""
        return kept(self, "_chains", (first, last, int(microbatches), objective),
                    lambda: PublicInstance(
                        self.name, self.model,
                        range_training(self.training, microbatches, objective),
                        self.datacenter_names[first:last + 1], self.links[first:last]),
                    CHAINS_KEPT)

    @property
    def period(self) -> bool:
        """Whether the run plans under the ``period`` objective (with ``M > 1``: one
        microbatch has no steady state, and both objectives give the same ``T``)."""
        return self.training.objective == "period" and self.microbatches > 1


def kept(holder, store: str, key, make, most: int | None = None):
    """What ``make()`` makes, kept in ``holder``'s attribute ``store`` (a dict, made on
    first use; a frozen dataclass's too) under ``key``: made once per key. With ``most``,
    the store holds at most that many, all dropped at once when it is full."""
    got = holder.__dict__.setdefault(store, {})
    value = got.get(key)
    if value is None:
        if most is not None and len(got) >= most:
            got.clear()
        value = got[key] = make()
    return value


def range_training(training: Training, microbatches: int,
                   objective: str | None = None) -> Training:
    """``training`` for one pipeline of ``microbatches`` on a range of the chain: the
    pipeline list ``[1]``, no cross-pipeline synchronisation period, and ``objective``
    (``None``: the same; ``"classic"`` for the classic solve that bounds a period run)."""
    return replace(training, microbatches=int(microbatches), pipeline_sync_period=1,
                   objective=training.objective if objective is None else objective,
                   parallelism=replace(training.parallelism, pipelines=(1,)))


# ---------------------------------------------------------------------- documents
def split_documents(instance: Instance) -> tuple[dict, list[dict]]:
    """``public.json``'s document and each DC's private document, in chain order."""
    doc = instance_to_dict(instance)
    public = {"format": PUBLIC_FORMAT, "name": doc["name"], "model": doc["model"],
              "training": doc["training"],
              "datacenters": [dc.name for dc in instance.datacenters], "links": doc["links"]}
    private = [{"format": PRIVATE_FORMAT, "index": k, "datacenter": dc}
               for k, dc in enumerate(doc["datacenters"])]
    return public, private


def private_file_name(index: int, name: str) -> str:
    return f"private-{index:02d}-{name}.json"


def write_split(instance: Instance, outdir) -> list[Path]:
    """Write ``public.json`` and one ``private-NN-<dc>.json`` per DC; returns the paths."""
    public, private = split_documents(instance)
    paths = [Path(outdir, "public.json")]
    paths += [Path(outdir, private_file_name(k, dc.name))
              for k, dc in enumerate(instance.datacenters)]
    for path, doc in zip(paths, [public, *private]):
        write_json(doc, path)
    return paths


def read_split(outdir) -> tuple[dict, list[dict]]:
    """The documents of a split directory, each DC's in chain order, all validated.

    Raises
    ------
    InstanceError
        One line per problem, naming the file and the JSON path.
    """
    outdir = Path(outdir)
    public = load_json(outdir / "public.json")
    private: dict[int, dict] = {}
    problems = []
    for path in sorted(outdir.glob("private-*.json")):
        doc = load_json(path)
        try:
            _, k, _ = read_view(public, doc, outdir / "public.json", path)
        except InstanceError as exc:
            problems += exc.problems
            continue
        private[k] = doc
    if problems:
        raise InstanceError(list(dict.fromkeys(problems)))
    names = public["datacenters"]
    missing = [names[k] for k in range(len(names)) if k not in private]
    if missing:
        raise InstanceError([f"{outdir}: no private file for {', '.join(missing)}"])
    return public, [private[k] for k in range(len(names))]


def read_view(public: dict, private: dict, public_path="public.json",
              private_path="private.json") -> tuple[PublicInstance, int, Datacenter]:
    """What one DC holds: the public part, its index in the chain and its datacenter.

    The model, training and datacenter records are validated by
    :func:`chainpipe.io.instance_from_dict` (on the public records with this DC
    alone), the chain links by :mod:`chainpipe.io`'s link reader.

    Raises
    ------
    InstanceError
        One line per problem: ``<file>: <JSON path>: <what is wrong>``.
    """
    c, cp = Problems(), Problems()
    names, index = _check_envelopes(c, cp, public, private)
    links = []
    if not c.problems:
        if len(public["links"]) != len(names) - 1:
            c.add("links", f"must have exactly {len(names) - 1} entries (one per pair of "
                           f"neighbouring datacenters), got {len(public['links'])}")
        links = [link_from_dict(c, lk, f"links[{j}]") for j, lk in enumerate(public["links"])]
    problems = [f"{public_path}: {p}" for p in c.problems]
    problems += [f"{private_path}: {p}" for p in cp.problems]
    if problems:
        raise InstanceError(problems)
    try:
        # a chainpipe-public/1 file may predate contract v3: read its training as a /2
        # file's, so a missing objective is classic (a stated one is used as stated)
        own = instance_from_dict({"format": V2_FORMAT, "name": public["name"],
                                  "model": public["model"], "training": public["training"],
                                  "datacenters": [private["datacenter"]], "links": []})
    except InstanceError as exc:
        raise InstanceError([_file_of(p, public_path, private_path) for p in exc.problems]) \
            from None
    dc = own.datacenters[0]
    if dc.name != names[index]:
        raise InstanceError([f"{private_path}: datacenter.name: {dc.name!r}, but the chain "
                             f"has {names[index]!r} at index {index}"])
    view = PublicInstance(own.name, own.model, own.training, tuple(names), tuple(links))
    return view, index, dc


def read_public(public: dict, public_path="public.json") -> PublicInstance:
    """The public part alone, as the job's owner of a run across hosts holds it.

    Its records are checked as :func:`read_view` checks them; the reader of the
    instance format is given a stand-in datacenter (no private record exists here),
    which takes no part in the result.

    Raises
    ------
    InstanceError
        One line per problem: ``<file>: <JSON path>: <what is wrong>``.
    """
    names = public.get("datacenters") if isinstance(public, dict) else None
    first = names[0] if isinstance(names, list) and names and isinstance(names[0], str) else "x"
    stand_in = {"format": PRIVATE_FORMAT, "index": 0, "datacenter": {
        "name": first, "devices": [{"type": "stand-in", "count": 1, "flop_per_s": 1.0,
                                    "memory_bytes": 1.0}],
        "link": {"bandwidth_bytes_per_s": 1.0, "latency_s": 0.0}}}
    view, _, _ = read_view(public, stand_in, public_path, "(none)")
    return view


def _check_envelopes(c: Problems, cp: Problems, public, private) -> tuple[list, int]:
    """The chain's DC names (problems in ``c``) and the private document's index (``cp``)."""
    names: list = []
    pub = c.obj(public, "", _PUBLIC_KEYS)
    if pub is not None and all(k in pub for k in _PUBLIC_KEYS):
        if pub["format"] != PUBLIC_FORMAT:
            c.add("format", f"must be {PUBLIC_FORMAT!r}")
        if not isinstance(pub["links"], list):
            c.add("links", "must be an array")
        names = pub["datacenters"]
        if not isinstance(names, list) or not names:
            c.add("datacenters", "must be a non-empty array of DC names")
            names = []
        for k, n in enumerate(names):
            if msg := name_rule(n):
                c.add(f"datacenters[{k}]", msg)
            elif names.index(n) != k:
                c.add(f"datacenters[{k}]", f"duplicate datacenter name {n!r}")
    priv = cp.obj(private, "", _PRIVATE_KEYS)
    if priv is None or any(k not in priv for k in _PRIVATE_KEYS):
        return names, 0
    if priv["format"] != PRIVATE_FORMAT:
        cp.add("format", f"must be {PRIVATE_FORMAT!r}")
    index = priv["index"]
    if not (isinstance(index, int) and not isinstance(index, bool)
            and 0 <= index < max(len(names), 1)):
        cp.add("index", f"must be an integer in [0, {max(len(names) - 1, 0)}]")
        return names, 0
    return names, index


def _file_of(problem: str, public_path, private_path) -> str:
    """A problem of the one-DC instance, named in the document it comes from."""
    if problem.startswith("datacenters[0]"):
        return f"{private_path}: datacenter{problem[len('datacenters[0]'):]}"
    return f"{public_path}: {problem}"
