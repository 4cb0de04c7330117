"""A starting plan for the MIP routes: the best of the cheap heuristics.

The ILPs take it as a MIP start and as an upper bound that prunes stage and boundary
arcs no faster plan can use. Only heuristics that know nothing of the optimum are run
(the baselines built on the exact DP, ``comm-unaware`` and ``single-dc``, are not): each
route must prove the optimum on its own.
"""

from __future__ import annotations

import math

import numpy as np

from ..deadline import Deadline
from ..instance import Instance
from ..plan import Plan, evaluate

#: the heuristics tried, as ``module:function`` of :mod:`chainpipe.solvers.baselines`
HEURISTICS = (
    "balanced:proportional",
    "balanced:metis",
    "chain_search:uniform_chain",
    "chain_search:sailor",
    "equal_layers:megatron",
    "equal_layers:uniform",
)
#: share of the time left the heuristics may use together, at most ``MAX_S`` seconds
SHARE = 0.1
MAX_S = 2.0


def heuristic_plan(instance: Instance, deadline: Deadline | None = None,
                   part: Deadline | None = None) -> tuple[Plan | None, float, str | None]:
    """The fastest feasible plan of :data:`HEURISTICS` (``(None, inf, None)`` if none).

    Parameters
    ----------
    instance : Instance
        The instance.
    deadline : Deadline, optional
        The solve's deadline; the heuristics get :data:`SHARE` of what is left, at most
        :data:`MAX_S` seconds (each stops at that limit with the best plan it has).
    part : Deadline, optional
        The heuristics' own deadline instead of that share of the wall clock (a caller
        under a CPU-time limit hands its share in CPU seconds:
        :func:`chainpipe.formulations.pipelines.heuristic_plan`).

    Returns
    -------
    (Plan or None, float, str or None)
        The plan, its ``T`` by :func:`~chainpipe.plan.evaluate`, and the heuristic's name.
    """
    import importlib

    deadline = Deadline.of(deadline)
    share = Deadline(min(MAX_S, SHARE * deadline.remaining())) if part is None else part
    best: tuple[Plan | None, float, str | None] = (None, math.inf, None)
    for target in HEURISTICS:
        if share.expired():
            break
        module, func = target.split(":")
        run = getattr(importlib.import_module(f"chainpipe.solvers.baselines.{module}"), func)
        with np.errstate(all="ignore"):  # extreme figures: a heuristic's inf/nan is no plan
            out = run(instance, deadline=share)
        if out.plan is None:
            continue
        ev = evaluate(instance, out.plan)
        if ev.feasible and ev.iteration_time_s < best[1]:
            best = (out.plan, ev.iteration_time_s, func.replace("_", "-"))
    return best
