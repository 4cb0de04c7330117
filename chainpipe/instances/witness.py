"""Feasibility witnesses for instances with hybrid parallelism (contract version 2).

A witness is any plan :func:`chainpipe.plan.evaluate` accepts: it proves an
instance feasible and gives an upper bound on its optimum ``T``, nothing more.
:func:`hybrid_witness` tries a small family of regular plans and keeps the
fastest feasible one:

- every stage has the same shape ``(d, t)``, for each ``d`` and ``t`` the
  instance allows (``t`` at most the smallest node size of the groups used);
- each group runs ``n`` stages side by side on ``n * d * t`` of its devices,
  ``n`` its largest possible count divided by 1, 2, 4 or 8 (fewer, wider stages
  hold more layers each);
- or each group runs one stage, as wide as 1, 1/2, 1/4 or 1/8 of its devices
  allow, more replicas first or more tensor parallelism first;
- groups in chain order; the layers are cut into contiguous ranges whose FLOP
  are proportional to the stages' rates ``d * t * flop_per_s``.
"""

from __future__ import annotations

from itertools import accumulate, product

from ..instance import Instance
from ..plan import Plan, evaluate

#: the divisors of a group's largest stage count tried
SPREADS = (1, 2, 4, 8)


def balanced_cuts(flop: list[float], weights: list[float]) -> list[int] | None:
    """Cut points ``0 = c_0 < c_1 < ... < c_S = L`` giving stage ``s`` about its share.

    Stage ``s`` gets layers ``[c_s, c_{s+1})``, whose FLOP are close to
    ``weights[s] / sum(weights)`` of the total; every stage gets at least one
    layer. ``None`` when there are more stages than layers.
    """
    L, S = len(flop), len(weights)
    if S > L or S == 0:
        return None
    prefix = list(accumulate(flop, initial=0.0))
    total, wsum = prefix[-1], sum(weights)
    cuts, acc = [0], 0.0
    for s in range(S - 1):
        acc += weights[s]
        target = total * acc / wsum
        lo, hi = cuts[-1] + 1, L - (S - 1 - s)  # leave a layer for each stage after this one
        best = min(range(lo, hi + 1), key=lambda c: abs(prefix[c] - target))
        cuts.append(best)
    cuts.append(L)
    return cuts


def _layouts(instance: Instance):
    """Stage lists ``[(dc, group, d, t), ...]`` of the regular family, in chain order."""
    par = instance.parallelism
    groups = [(k, g, group) for k, dc in enumerate(instance.datacenters)
              for g, group in enumerate(dc.devices)]
    widths = instance.training.data_parallel_widths
    for d, t, spread in product(widths, par.tensor_parallel, SPREADS):
        stages = []
        for k, g, group in groups:
            if t <= group.devices_per_node:
                stages.extend([(k, g, d, t)] * (group.count // (d * t) // spread))
        if stages:
            yield stages
    # one stage per group, each as wide as its share allows (more replicas, or more tensor
    # parallelism, first)
    for spread, wide_t in product(SPREADS, (False, True)):
        stages = []
        for k, g, group in groups:
            shapes = [(d * t, t if wide_t else d, d, t)
                      for d, t in product(widths, par.tensor_parallel)
                      if t <= group.devices_per_node and d * t <= group.count // spread]
            if shapes:
                stages.append((k, g, *max(shapes)[2:]))
        if stages:
            yield stages


def hybrid_witness(instance: Instance) -> Plan | None:
    """The fastest feasible plan of the regular family, or ``None`` if none is feasible.

    Parameters
    ----------
    instance : Instance
        Any instance; its ``parallelism`` lists give the shapes tried.

    Returns
    -------
    Plan or None
        A plan :func:`chainpipe.plan.evaluate` finds feasible; ``None`` proves nothing.
    """
    flop = [ly.flop for ly in instance.layers]
    best, best_t = None, float("inf")
    seen = set()
    for stages in _layouts(instance):
        key = tuple(stages)
        if key in seen:
            continue
        seen.add(key)
        groups = [instance.datacenters[k].devices[g] for k, g, _d, _t in stages]
        weights = [grp.flop_per_s * d * t for grp, (_k, _g, d, t) in zip(groups, stages)]
        cuts = balanced_cuts(flop, weights)
        if cuts is None:
            continue
        plan = Plan.from_tuples(instance, [(cuts[s], cuts[s + 1], *stages[s])
                                           for s in range(len(stages))])
        ev = evaluate(instance, plan)
        if ev.feasible and ev.iteration_time_s < best_t:
            best, best_t = plan, ev.iteration_time_s
    return best


def plan_tuples(instance: Instance, plan: Plan) -> list[list[int]]:
    """``[[start, end, dc, group, d, t], ...]``: the plan as :meth:`Plan.from_tuples` reads it."""
    out = []
    for st in plan.stages:
        ref = instance.locate(st.device)
        out.append([st.start, st.end, ref.dc, ref.group, st.data_parallel, st.tensor_parallel])
    return out
