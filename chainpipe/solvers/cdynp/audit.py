"""The owner's check of the summaries a plan was chosen by, against the plan's cost.

The job's owner runs the plan, so it learns what each stage and each boundary
costs (here: :func:`chainpipe.plan.evaluate`). Each agent reports the point of
its downstream neighbour's summary that its part of the plan goes on with, as it
received it. For every such point the owner computes what an honest sender
would have claimed, the cost of the plan's suffix from that boundary as the
receiver sees it, and compares:

* a claim better than the suffix's true cost (fewer stages, a wider path, a
  smaller bottleneck, total or synchronisation) is forged: compression only ever
  rounds costs up;
* in exact mode a claim must equal the true cost (to a relative ``1e-9``).

Going from the end of the chain, the first point that fails was forged by the
DC that sent it: a lie further downstream would already show there. A DC that
also misreports what it received can move the blame one hop downstream; it
cannot hide the forgery.
"""

from __future__ import annotations

from ... import cost
from ...plan import Evaluation
from .public import PublicInstance
from .runner import AgentFailure

_RTOL = 1e-9


def check_claims(public: PublicInstance, plan_eval: Evaluation, reports: list[dict], *,
                 exact: bool, count_sync: bool = True) -> None:
    """Raise :class:`AgentFailure` naming the DC whose summary misstated the plan's cost.

    Parameters
    ----------
    public : PublicInstance
        The public part of the instance (DC names, chain links, the position cap).
    plan_eval : Evaluation
        The assembled plan's evaluation.
    reports : list of dict
        The agents' reports in chain order (``continues_with`` of each).
    exact : bool
        No compression: claims must be exact.
    count_sync : bool, default True
        ``False`` for a range search under ``sync_cap`` (:mod:`.pipelines`), whose points
        count no synchronisation: the claims' ``sync_s`` must then be 0.
    """
    names = list(public.datacenter_names)
    stages, bounds = plan_eval.stages, plan_eval.boundaries
    dc_of = [names.index(s.datacenter) for s in stages]
    for i in range(len(reports) - 2, -1, -1):  # receiver i, sender i + 1: from the end
        claim = reports[i].get("continues_with")
        if claim is None:
            continue
        sender = names[i + 1]
        b = claim["b"]
        first = next((s for s, st in enumerate(stages) if st.start == b), None)
        if first is None or dc_of[first] <= i:
            raise AgentFailure(f"DC {sender!r} sent a forged summary: the plan has no stage "
                               f"downstream of {names[i]!r} starting at layer {b}", sender)
        bw, hop = None, 0.0
        if b > 0:
            bw, lat = cost.chain_path(public.links, i, dc_of[first])
            hop = float(cost.traversal(lat, 0.0))  # the latencies the senders fold in
        if public.period:
            truth = _period_suffix(public, stages, bounds, first, hop, count_sync)
            problem = _period_misstated(claim, truth, bw, exact)
        else:
            r, bn, sm, sy = _suffix(stages, bounds, first, public.position_cap)
            if not count_sync:
                sy = 0.0
            problem = _misstated(claim, (r, bn, sm + hop, sy), bw, exact)
        if problem:
            raise AgentFailure(f"DC {sender!r} sent a forged summary: for the layers from {b} "
                               f"on it {problem}", sender)


def _suffix(stages, bounds, first: int, position_cap: int) -> tuple[int, float, float, float]:
    """``(r, bottleneck, total, sync)`` of the plan's stages from ``first`` on, as the DC
    of that stage computes it (the boundary before it excluded)."""
    compute = [s.compute_time_s for s in stages[first:]]
    inner = bounds[first:]
    total, bottleneck = cost.fill_and_bottleneck(compute, [bd.occupancy_s for bd in inner],
                                                 [bd.traversal_s for bd in inner])
    sync = max(s.sync_time_s for s in stages[first:])
    return min(len(compute), position_cap), bottleneck, total, sync


def _misstated(claim: dict, truth: tuple, bw, exact: bool) -> str | None:
    r, bn, sm, sy = claim["point"]
    tr, tbn, tsm, tsy = truth
    if r < tr:
        return f"claims {r} stage(s), the plan has {tr} there"
    if bw is not None and claim["bw"] > bw:
        return f"claims a path bandwidth of {claim['bw']:g} B/s, the path has {bw:g}"
    for what, c, t in (("bottleneck", bn, tbn), ("total", sm, tsm), ("synchronisation", sy, tsy)):
        if c < t * (1 - _RTOL):
            return f"claims a {what} of {c:.9g} s, its stages take {t:.9g} s"
        if exact and c > t * (1 + _RTOL):
            return f"claims a {what} of {c:.9g} s, its stages take {t:.9g} s"
    if exact and (r != tr or (bw is not None and claim["bw"] != bw)):
        return "claims a stage count or path that is not the plan's"
    return None


def _period_suffix(public: PublicInstance, stages, bounds, first: int, hop: float,
                   count_sync: bool) -> tuple:
    """``(r, x1, x2, total, sync, hull)`` of the plan's stages from ``first`` on under
    ``period``, as the receiver holds it (``hop``: the latency part of the traversal into
    the suffix, in ``total`` and in every window): the suffix's label rebuilt stage by
    stage from the end with the agents' own :func:`.period.prepend`, from the costs the
    plan's evaluation gives."""
    from .period import PeriodDP, prepend

    M, gpipe = public.microbatches, public.training.schedule == "gpipe"
    label = PeriodDP.end_label()[:6]
    for s in range(len(stages) - 1, first - 1, -1):
        st = stages[s]
        U = bounds[s].occupancy_s if s < len(stages) - 1 else 0.0
        Q = bounds[s].traversal_s if s < len(stages) - 1 else 0.0
        label = prepend(label, (st.compute_time_s, st.forward_time_s, st.backward_time_s,
                                st.sync_time_s if count_sync else 0.0), U, Q, M=M,
                        gpipe=gpipe, p_cap=public.position_cap)
    x1, x2, total, sync, p, hull = label
    return p, x1, x2, total + hop, sync, tuple(h + hop for h in hull)


def _period_misstated(claim: dict, truth: tuple, bw, exact: bool) -> str | None:
    r, x1, x2, sm, sy, hull = claim["point"]
    tr, tx1, tx2, tsm, tsy, thull = truth
    if r != tr:  # under 1F1B fewer stages is not better: positions decide the loops
        return f"claims {r} stage(s), the plan has {tr} there"
    if bw is not None and claim["bw"] > bw:
        return f"claims a path bandwidth of {claim['bw']:g} B/s, the path has {bw:g}"
    for what, c, t in (("period", x1, tx1), ("second phase", x2, tx2), ("total", sm, tsm),
                       ("synchronisation", sy, tsy)):
        if c < t * (1 - _RTOL) or (exact and c > t * (1 + _RTOL)):
            return f"claims a {what} of {c:.9g} s, its stages take {t:.9g} s"
    if len(hull) != len(thull) or any(c < t * (1 - _RTOL) or (exact and c > t * (1 + _RTOL))
                                      for c, t in zip(hull, thull)):
        return "claims window sums its stages do not have"
    if exact and bw is not None and claim["bw"] != bw:
        return "claims a path that is not the plan's"
    return None
