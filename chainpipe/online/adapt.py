"""Running jobs when the network changes under them (scenario ``events``): keep, re-plan or
move.

When an event changes a fibre link or a DC's GPUs of one type (``docs/online.md``, "Link
events", "Device events"), every running job whose reserved spans or devices it touches is
asked about: its offer is re-priced on the network as it is now
(:meth:`~.offers.Planner.reprice`: the same devices and wavelengths, the links' and the
groups' rates of now) and the running plan re-evaluated there (``T_kept``). A policy then
decides
(:meth:`~.policies.Policy.adapt`):

- **keep**: the running plan goes on at ``T_kept`` (every policy but ``chain-dp-replan``
  does this: the job lives with the changed link);
- **re-plan** (``chain-dp-replan``): the exact ``dp`` optimum of the re-priced offer, on the
  job's own devices and wavelengths, moved to by :func:`chainpipe.replan.replan`: every
  layer whose new stage runs on other devices receives its parameter state over the
  changed links; the job pauses for the move (no iteration progresses);
- **move** (``chain-dp-replan``): the best ``dp`` placement on the ``k`` shortest chains of
  what is free once the job's own resources are released, priced by
  :func:`chainpipe.replan.move_cost` on a pricing instance (:func:`pricing_instance`):
  the DCs of the old and the new placement in the order of the shortest fibre path
  through all of them, each link the spans between two of them at the job's wavelength
  allowance (what is free, at most ``max_wavelengths``) under the events so far. A move
  whose DCs no simple path of the network joins is not priced, and not taken. The
  online simulation tracks GPUs as counts per DC and type, so a device keeps its name
  (``dc/type/i``) across offers: a layer whose new devices have the names of its old
  ones does not move.

The decision takes the option with the least time left, ``move_s + left x T`` over the
``left`` iterations still to run, and leaves the plan only when that saves time over
keeping: the time the new plan saves over the job's remaining horizon exceeds the move.
Iterations progress continuously (a fraction of an iteration counts), and a move holds
only the new resources from the decision on.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from ..instance import Datacenter, Instance
from ..plan import evaluate
from ..replan import move_cost, replan
from .network import edge
from .state import Placement, ResourceState

#: the decisions, in the order reports list them
DECISIONS = ("keep", "replan", "move")


@dataclass(frozen=True)
class Adaptation:
    """One decision about a running job after a link changed.

    Attributes
    ----------
    job : int
        The job's id.
    time_s : float
        When (the event's time).
    decision : {"keep", "replan", "move"}
    left : float
        Iterations still to run.
    before_s : float
        ``T`` of the running plan on the links before the event.
    kept_s : float
        ``T`` of the running plan on the changed links.
    after_s : float
        ``T`` from now on (``kept_s`` when kept).
    move_s : float
        Seconds the move pauses the job (0 when kept).
    gain_s : float
        ``left (kept_s - after_s) - move_s``: the job's time the decision saves against
        keeping (0 when kept).
    reason : str
        One line.
    """

    job: int
    time_s: float
    decision: str
    left: float
    before_s: float
    kept_s: float
    after_s: float
    move_s: float
    gain_s: float
    reason: str

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def kept(planner, p: Placement, state: ResourceState) -> Placement:
    """``p`` on the network as it is now: its offer re-priced, its plan re-evaluated."""
    offer = planner.reprice(p.offer, state)
    if offer is p.offer:
        return p
    ev = evaluate(offer.instance, p.plan)
    T = ev.iteration_time_s if ev.feasible else math.inf
    return dataclasses.replace(p, instance=offer.instance, offer=offer, iteration_time_s=T)


def keep(p: Placement, now_p: Placement, left: float, now: float,
         reason: str = "the policy keeps running plans") -> Adaptation:
    """The :class:`Adaptation` of keeping ``p`` (``now_p``: it on the changed links)."""
    return Adaptation(p.job.id, now, "keep", left, p.iteration_time_s, now_p.iteration_time_s,
                      now_p.iteration_time_s, 0.0, 0.0, reason)


def replan_in_place(policy, p: Placement, now_p: Placement, left: float):
    """``(placement, move_s, reason)`` of the job's ``dp`` optimum on its own re-priced offer,
    or ``None`` without a plan or a finite move (:func:`chainpipe.replan.replan`)."""
    planner = policy.planner
    plan, T, res = planner.solve(now_p.offer, "dp")
    if plan is None:
        return None
    r = replan(p.instance, p.plan, now_p.instance, horizon=max(1, math.ceil(left)),
               result=res)
    if not math.isfinite(r.move_s):
        return None
    q = planner.placement(p.job, now_p.offer, plan, T, note="re-planned")
    return q, r.move_s, r.reason


def covering_path(network, dcs: set[str]) -> tuple[str, ...] | None:
    """The shortest simple fibre path (by km, then names) through every DC of ``dcs``,
    ending at two of them; ``None`` if no simple path joins them all (remembered per
    network and set)."""
    import networkx as nx

    if len(dcs) == 1:
        return tuple(dcs)
    cache = network.__dict__.setdefault("_covering_paths", {})
    key = frozenset(dcs)
    if key not in cache:
        cache[key] = _covering_path(nx, network, dcs)
    return cache[key]


def _covering_path(nx, network, dcs: set[str]) -> tuple[str, ...] | None:
    """:func:`covering_path`, searched."""
    best, best_key = None, None
    ends = sorted(dcs)
    for i, a in enumerate(ends):
        for b in ends[i + 1:]:
            for path in nx.all_simple_paths(network.graph, a, b):
                if dcs <= set(path):
                    km = sum(network.km[edge(path[k], path[k + 1])]
                             for k in range(len(path) - 1))
                    key = (km, tuple(path))
                    if best_key is None or key < best_key:
                        best, best_key = tuple(path), key
    return best


def pricing_instance(planner, p: Placement, q: Placement, state: ResourceState):
    """The instance a move from ``p`` to ``q`` is priced on (module doc), or ``None``: the
    DCs of both in fibre-path order, each with the device groups of both placements'
    offers (the larger count of a type), the spans between two of them merged into one
    link as an offer's are, at ``min(free, max_wavelengths)`` wavelengths each."""
    old = {dc.name: dc for dc in p.instance.datacenters}
    new = {dc.name: dc for dc in q.instance.datacenters}
    path = covering_path(planner.network, set(p.datacenters) | set(q.datacenters))
    if path is None:
        return None
    built, spans_of, pending = [], [], []
    for k, name in enumerate(path):
        if k > 0:
            pending.append(edge(path[k - 1], name))
        if name not in old and name not in new:
            continue
        groups = {}
        for dc in (old.get(name), new.get(name)):
            for g in () if dc is None else dc.devices:
                if g.type not in groups or groups[g.type].count < g.count:
                    groups[g.type] = g
        if built:
            spans_of.append(tuple(pending))
        pending = []
        link = (old.get(name) or new.get(name)).link
        built.append(Datacenter(name, tuple(groups.values()), link))
    wavelengths = {s: min(state.free_wavelengths(s), p.job.max_wavelengths)
                   for spans in spans_of for s in spans}
    if any(w < 1 for w in wavelengths.values()):
        return None
    return Instance("move", q.instance.model, q.instance.training, tuple(built),
                    planner.links(spans_of, wavelengths, state))


def move_elsewhere(policy, p: Placement, state: ResourceState):
    """``(placement, move_s, reason)`` of the best ``dp`` placement on what is free once the
    job's own resources are released, if it holds other resources than ``p`` and its move
    is priced (module doc); else ``None``."""
    trial = state.copy()
    trial.release(p)
    chains = policy.planner.candidates(p.job, trial, policy.k)
    q = policy.best_dp(p.job, trial, chains) if chains else None
    if q is None or (dict(q.devices) == dict(p.devices)
                     and dict(q.wavelengths) == dict(p.wavelengths)):
        return None
    trial.allocate(q)
    pricing = pricing_instance(policy.planner, p, q, trial)
    if pricing is None:
        return None
    _transfers, nbytes, seconds, _lost = move_cost(p.instance, p.plan, pricing, q.plan)
    if not math.isfinite(seconds):
        return None
    q = dataclasses.replace(q, note="moved")
    return q, seconds, (f"moved to {'+'.join(q.datacenters)}: {nbytes / 2**30:.3g} GiB of "
                        f"parameter state")


def decide(policy, p: Placement, state: ResourceState, left: float, now: float):
    """``(Adaptation, placement from now on)``: keep, re-plan or move, whichever leaves the
    least time, ``move_s + left x T`` (keep unless another saves time)."""
    now_p = kept(policy.planner, p, state)
    options = [("keep", now_p, 0.0, "keeping is fastest")]
    here = replan_in_place(policy, p, now_p, left)
    if here is not None:
        options.append(("replan", *here))
    there = move_elsewhere(policy, p, state)
    if there is not None:
        options.append(("move", *there))
    base = left * now_p.iteration_time_s
    name, q, move_s, reason = min(options, key=lambda o: o[2] + left * o[1].iteration_time_s)
    gain = base - (move_s + left * q.iteration_time_s)
    if name == "keep" or not gain > 0:
        return keep(p, now_p, left, now, "no option saves time over the remaining "
                                         f"{left:.6g} iterations"), now_p
    return Adaptation(p.job.id, now, name, left, p.iteration_time_s, now_p.iteration_time_s,
                      q.iteration_time_s, move_s, gain,
                      f"{left:.6g} iterations x {now_p.iteration_time_s - q.iteration_time_s:.6g}"
                      f" s saved > the move's {move_s:.6g} s; {reason}"), q


def counts(adaptations) -> dict:
    """The policy's report of its adaptations: ``{decision}_count``; ``adapt_gain_s``, the
    gains summed; ``adapt_move_s``, the moves' seconds summed; ``adapt_better_count``, the
    switches to a plan faster than the job's before the event (a re-optimisation on what
    has been freed since, not only a repair), and ``adapt_better_s``, the part of their gain
    below the job's pre-event time, ``left x (before_s - after_s)``."""
    out = {f"{d}_count": sum(1 for a in adaptations if a.decision == d) for d in DECISIONS}
    out["adapt_gain_s"] = sum(a.gain_s for a in adaptations)
    out["adapt_move_s"] = sum(a.move_s for a in adaptations)
    better = [a for a in adaptations if a.decision != "keep" and a.after_s < a.before_s]
    out["adapt_better_count"] = len(better)
    out["adapt_better_s"] = sum(a.left * (a.before_s - a.after_s) for a in better)
    return out


__all__ = ["DECISIONS", "Adaptation", "counts", "decide", "keep", "kept", "move_elsewhere",
           "replan_in_place"]
