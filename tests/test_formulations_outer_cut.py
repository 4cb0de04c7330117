"""The outer enumeration of several pipelines (``OuterSearch.visit``): an entry that the
end of the first pass's phase cut short is the first one the next pass takes, not the
last by its bound (fresh ``v3-medium-02``-like seed 4: a joint model cut at the first
pass's end held the plan that the run then never found)."""

from __future__ import annotations

import dataclasses

from chainpipe.deadline import Deadline
from chainpipe.formulations import pipelines as pl
from helpers import random_v3_instance


def _instance():
    """A random v3 instance of three DCs with one to three pipelines on which an entry of
    several DCs has a lower cheap bound than every entry of single-DC blocks (the
    second pass would take it first by its bound)."""
    for seed in range(80):
        inst = random_v3_instance(seed)
        if len(inst.datacenters) < 3:
            continue
        par = dataclasses.replace(inst.training.parallelism, pipelines=(1, 2, 3))
        inst = dataclasses.replace(inst, training=dataclasses.replace(
            inst.training, microbatches=8, parallelism=par))
        search = pl.OuterSearch(inst, Deadline(None), None, None)
        todo = pl.entries(inst)
        cheap = [max(search.cheap(a, b, m) for (a, b), m in zip(e.blocks, e.splits))
                 + e.cross for e in todo]
        local = [c for c, e in zip(cheap, todo) if all(a == b for a, b in e.blocks)]
        wide = [c for c, e in zip(cheap, todo) if any(a < b for a, b in e.blocks)]
        if local and wide and min(wide) < min(local):
            return inst
    raise AssertionError("no instance with a cheaper entry of several DCs")


def test_an_entry_cut_by_the_first_pass_end_is_taken_first_in_the_next(monkeypatch):
    """The first entry of the first pass works past that pass's phase (a joint model
    cut at its end); the second pass must take it first (fails when the pass orders
    by bound alone: an entry of several DCs has a lower one)."""
    inst = _instance()
    order, passes = [], []

    def entry(self, e):
        order.append(e)
        passes.append(self.until is self.deadline)
        if len(order) == 1:
            while not self.until.expired():  # a joint model to the phase's CPU end
                sum(range(10_000))
            return
        e.done, e.bound = True, float("inf")  # pruned: the rest costs nothing

    monkeypatch.setattr(pl.OuterSearch, "entry", entry)
    # a first pass of 1.2 CPU s within 30 s of wall clock: on a loaded machine (a third of
    # a core) a wall-clock limit of 3 s, its pass 40 % of it, ended before the pass did
    search = pl.OuterSearch(inst, Deadline(30.0), None, None, local_share=0.04)
    search.run()
    assert passes[0] is False and True in passes, passes
    second = passes.index(True)
    assert order[second] is order[0], [(e.blocks, e.splits) for e in order[:second + 1]]
