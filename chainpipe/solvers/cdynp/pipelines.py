"""CDynP with several pipelines (contract version 3, section 3): the owner's search.

How many pipelines run, which range of DCs each occupies and how many microbatches
each takes are the job owner's public decisions (contract section 5); each range then
plans as a chain of its own. With ``T = max_p T_p + max_{p,s} R_s + R_X / H``:

- ``R_X`` depends only on the model and the chain links of the outer span (public), so
  the owner computes it itself (:func:`chainpipe.cost.cross_sync_time`, the one cost
  model's term);
- a pipeline's ``T_p`` and ``max R_s`` depend only on its stages and ``M_p``. The owner
  asks, for a range ``[i, j]``, a count ``m`` and a synchronisation limit ``theta``,
  ``g(i, j, m, theta)``: the least ``T_p`` of a pipeline on DCs ``i..j`` with ``M_p = m``
  and every ``R_s < theta``. One CDynP run over the agents of DCs ``i..j`` answers it
  (:class:`RangeRuns`): the chain is the range's, ``M = m``, and every agent uses only
  the options with ``R < theta`` and counts ``R`` as 0 (agent option ``sync_cap``), so the
  run's optimum is ``g`` exactly (the run is the version-2 protocol, exact);
- per count ``P`` and span ``[i0, j0]``, a sweep over ``theta`` (``docs/dp.md``, "Several
  pipelines", item 3): with ``theta = inf``, then ``theta`` = the last solution's own
  ``max R`` (strictly below), the least ``tau = max_p T_p`` over the splits of the span
  into ``P`` consecutive ranges and of ``M`` into ``M_p >= 1``; its plan has ``T <= tau +
  rho' + R_X / H`` (``rho' < theta`` its own ``max R``) and every plan of that span with
  ``max R`` in ``[rho', theta)`` has ``T >= tau + rho' + R_X / H``. The sweep stops when
  ``tau + R_X / H`` cannot beat the best plan known, or no plan is left.

A range of the split may hold DCs its pipeline does not use: the plan's real span (and
so its ``R_X``) is then narrower, and the span that is exactly the plan's is searched
too; every candidate's ``T`` is :func:`chainpipe.plan.evaluate`'s.

Only the ``classic`` objective (``chainpipe.support``): a range's run is the version-2
protocol, whose points carry ``max(C, U)`` as the period.
"""

from __future__ import annotations

import dataclasses
import math
import sys
from pathlib import Path

from ... import cost
from ...deadline import Deadline
from ...instance import Instance
from ...plan import Pipeline, Plan, Stage, evaluate
from .drive import agent_options


def chain_instance(instance: Instance, i: int, j: int, microbatches: int) -> Instance:
    """The range ``i..j`` of ``instance``'s chain as an instance of one pipeline of
    ``microbatches`` (the instance's objective): what the range's agents plan (each gets
    only its own DC record of it, as for the whole chain)."""
    tr = instance.training
    training = dataclasses.replace(
        tr, microbatches=int(microbatches), pipeline_sync_period=1,
        parallelism=dataclasses.replace(tr.parallelism, pipelines=(1,)))
    return dataclasses.replace(instance, training=training,
                               datacenters=tuple(instance.datacenters[i:j + 1]),
                               links=tuple(instance.links[i:j]))


@dataclasses.dataclass(frozen=True)
class RangePlan:
    """What a range run gave the owner: ``T_p``, the plan's ``max R_s``, its stages."""

    time: float
    sync: float
    stages: tuple[Stage, ...]


class RangeRuns:
    """``g(i, j, m, theta)`` by CDynP runs over the range's agents, remembered.

    Parameters
    ----------
    instance : Instance
        The whole instance (the owner simulates every agent with its own DC record, in
        this process or in one child process each, as for one pipeline).
    processes : bool
        One OS process per agent and run.
    message_timeout : float
        As for :func:`chainpipe.solvers.cdynp.run`.
    deadline : Deadline
    trace_dir : path, optional
        Each run's messages go to ``trace_dir/range-<i>-<j>-m<m>-<n>/``.
    """

    def __init__(self, instance: Instance, processes: bool, message_timeout: float,
                 deadline: Deadline, trace_dir=None):
        self.instance, self.processes, self.timeout = instance, processes, message_timeout
        self.deadline, self.trace_dir = deadline, trace_dir
        #: (i, j, m) -> [(theta, RangePlan or None)] of the runs made
        self.known: dict[tuple[int, int, int], list] = {}
        self.runs = 0
        self.messages: list[dict] = []
        self.labels = 0

    def least(self, i: int, j: int, m: int, theta: float) -> RangePlan | None:
        """The plan of least ``T_p`` on DCs ``i..j`` with ``M_p = m`` and every ``R_s <
        theta`` (``None``: none exists). A run at ``theta'`` answers every ``theta <=
        theta'`` whose plan has ``max R < theta`` (the least ``T_p`` cannot fall as
        ``theta`` does), and one that found nothing every ``theta <= theta'``."""
        for th, got in self.known.get((i, j, m), ()):
            if th >= theta and (got is None or got.sync < theta):
                return got
        got = self._run(i, j, m, theta)
        self.known.setdefault((i, j, m), []).append((theta, got))
        return got

    def _run(self, i: int, j: int, m: int, theta: float) -> RangePlan | None:
        from . import InstanceAgents

        sub = chain_instance(self.instance, i, j, m)
        backend = InstanceAgents(sub, self.processes, self.timeout, count_sync=False)
        # theta = inf as the largest float (a message carries no infinity): every R is below
        options = {**agent_options(), "sync_cap": min(theta, sys.float_info.max)}
        trace = None
        name = f"range-{i}-{j}-m{m}-{self.runs:03d}"
        if self.trace_dir is not None:
            trace = Path(self.trace_dir, name)
        self.runs += 1
        res = backend.one_run(options, trace, self.deadline)
        self.messages += [{**msg, "file": f"{name}/{msg['file']}"} for msg in res.messages]
        self.labels += sum(a.get("labels", 0) for a in res.agents)
        plan = backend.assemble(res, True)
        if plan is None:
            return None
        ev = evaluate(sub, plan)
        return RangePlan(float(ev.pipelines[0].time_s), float(ev.sync_s), plan.stages)


def split_microbatches(times, M: int, P: int):
    """The least ``max_p g_p(m_p)`` over ``m_1 + ... + m_P = M``, ``m_p >= 1``.

    Parameters
    ----------
    times : callable
        ``times(p, m)``: ``T_p`` of range ``p`` with ``m`` microbatches, ``inf`` where no
        plan exists; non-decreasing in ``m`` (``docs/dp.md``, "Several pipelines",
        item 2), which lets each range stop at its first ``inf``.
    M, P : int

    Returns
    -------
    tuple or None
        ``(tau, [m_1, ..., m_P])``, or ``None`` when no split has a plan on every range.
    """
    # best[n]: (least max over the ranges so far taking n microbatches, their split)
    best: dict[int, tuple[float, list]] = {0: (0.0, [])}
    for p in range(P):
        nxt: dict[int, tuple[float, list]] = {}
        most = M - (P - 1 - p)  # every later range takes at least one
        for n, (tau, ms) in best.items():
            for m in range(1, most - n + 1):
                t = times(p, m)
                if math.isinf(t):
                    break  # a larger m is no better (and no more feasible)
                cand = (max(tau, t), ms + [m])
                if n + m not in nxt or cand[0] < nxt[n + m][0]:
                    nxt[n + m] = cand
        best = nxt
    return best.get(M)


def partitions(i0: int, j0: int, P: int):
    """Every split of the DCs ``i0..j0`` into ``P`` consecutive non-empty ranges, as
    ``[(i, j), ...]`` in chain order."""
    if P == 1:
        yield [(i0, j0)]
        return
    for cut in range(i0, j0 - P + 2):
        for rest in partitions(cut + 1, j0, P - 1):
            yield [(i0, cut), *rest]


def several(instance: Instance, counts, runs: RangeRuns, best_T: float, deadline: Deadline):
    """The best plan of ``P >= 2`` pipelines, ``P`` in ``counts``, that beats ``best_T``.

    Parameters
    ----------
    instance : Instance
    counts : iterable of int
        Pipeline counts, each at most ``min(M, K)``.
    runs : RangeRuns
    best_T : float
        ``T`` of the best plan known (``inf``: none); only plans below it are returned.
    deadline : Deadline

    Returns
    -------
    tuple
        ``(T, plan)`` of the best plan found below ``best_T``, or ``(best_T, None)``.
    """
    K, M = instance.num_datacenters, instance.microbatches
    H = instance.training.pipeline_sync_period
    total_params = float(sum(ly.params for ly in instance.layers))
    gamma = instance.training.gradient_bytes_per_param
    found = None
    for P in counts:
        for i0 in range(K):
            for j0 in range(i0 + P - 1, K):
                bw, lat = cost.chain_path(instance.links, i0, j0)
                rx = float(cost.cross_sync_time(total_params, gamma, bw, lat)) / H
                theta = math.inf
                while True:
                    deadline.check()
                    got = _least_max(instance, runs, P, i0, j0, theta, M)
                    if got is None:
                        break
                    tau, chosen = got
                    if tau + rx >= best_T:  # every plan left in the sweep: T >= tau + R_X / H
                        break
                    plan = Plan(pipelines=[Pipeline(rp.stages, m) for rp, m in chosen])
                    T = evaluate(instance, plan).iteration_time_s
                    if T < best_T:
                        best_T, found = T, plan
                    rho = max(rp.sync for rp, _m in chosen)
                    if not rho < theta or rho <= 0.0:
                        break  # rho < theta always (the runs' options); 0: nothing below
                    theta = rho
    return best_T, found


def _least_max(instance, runs: RangeRuns, P: int, i0: int, j0: int, theta: float, M: int):
    """The least ``max_p T_p`` of ``P`` pipelines on consecutive ranges splitting
    ``i0..j0``, every ``R_s < theta``, and the chosen ``(RangePlan, M_p)`` per range."""
    best = None
    for ranges in partitions(i0, j0, P):
        def times(p, m, ranges=ranges):
            got = runs.least(*ranges[p], m, theta)
            return math.inf if got is None else got.time

        split = split_microbatches(times, M, P)
        if split is not None and (best is None or split[0] < best[0]):
            best = (split[0], [(runs.least(*r, m, theta), m) for r, m in zip(ranges, split[1])])
    return best
