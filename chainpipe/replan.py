"""Re-planning when the network or the devices change: keep the running plan, or move.

:func:`replan` answers ``chainpipe replan INSTANCE PLAN NEW_INSTANCE [--horizon N]``:

1. the new optimum: the plan a solver (``dp`` by default) finds on the new instance;
2. the old plan re-evaluated on the new instance (:func:`chainpipe.plan.evaluate`): its
   new ``T``, or why it no longer runs (a device gone, a memory limit broken);
3. the cost of moving to the new plan: every layer whose new stage runs on other
   devices than every old stage that held it must receive its parameter state,
   ``bytes_per_param`` bytes per parameter (weights, gradients and optimizer state, the
   memory rule's ``beta``; one copy per layer, replicas inside a DC copied from it
   there), from the old holder nearest to it (by the new instance's path time). All
   transfers run at once: each link carries the bytes of every transfer whose path uses
   it (a chain link for a transfer between DCs, the DC's own link inside one), at its
   bandwidth, and the move takes the busiest link's time
   (:func:`chainpipe.cost.occupancy`) plus the longest path latency
   (:func:`chainpipe.cost.path`). A layer whose every old holder is in a datacenter
   the new instance no longer has cannot be sent over the contract's links: the move
   is then infinite (restore from a checkpoint);
4. the decision: switch when the time the new plan saves over the horizon,
   ``N (T_old - T_new)``, exceeds the move; always when the old plan no longer runs
   and a new one does.

Datacenters are matched by name between the two instances, devices by their names.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from . import cost
from .instance import Instance
from .plan import Plan, evaluate

#: iterations the saving is counted over when ``--horizon`` is not given
DEFAULT_HORIZON = 1000


@dataclass(frozen=True)
class Transfer:
    """The state one new stage receives from one datacenter.

    Attributes
    ----------
    pipeline, stage : int
        The receiving stage of the new plan.
    layers : tuple of int
        The layers whose state it receives from ``source``.
    source, target : str
        Datacenter names (the new instance's).
    bytes : float
        ``bytes_per_param x`` their parameters.
    seconds : float
        Alone on its path: ``bytes / bandwidth + latency``.
    """

    pipeline: int
    stage: int
    layers: tuple[int, ...]
    source: str
    target: str
    bytes: float
    seconds: float


@dataclass
class Replan:
    """What :func:`replan` found; ``to_dict`` is ``replan --format json``."""

    old_time_s: float  # T of the old plan on the old instance
    old_on_new_s: float  # T of the old plan on the new instance (inf: it no longer runs)
    old_violations: tuple[str, ...]
    new_status: str
    new_time_s: float | None
    new_plan: Plan | None
    solver: str
    horizon: int
    transfers: list[Transfer] = field(default_factory=list)
    move_bytes: float = 0.0
    move_s: float = 0.0
    lost_layers: tuple[int, ...] = ()
    decision: str = "keep"
    reason: str = ""

    @property
    def saved_s(self) -> float | None:
        """``N (T_old - T_new)``, the time the new plan saves over the horizon."""
        if self.new_time_s is None or not math.isfinite(self.old_on_new_s):
            return None
        return self.horizon * (self.old_on_new_s - self.new_time_s)

    def to_dict(self) -> dict:
        return {
            "decision": self.decision, "reason": self.reason, "horizon": self.horizon,
            "old": {"iteration_time_s": self.old_time_s,
                    "on_new_instance_s": self.old_on_new_s if math.isfinite(self.old_on_new_s)
                    else None,
                    "feasible": not self.old_violations,
                    "violations": list(self.old_violations)},
            "new": {"solver": self.solver, "status": self.new_status,
                    "iteration_time_s": self.new_time_s,
                    "plan": None if self.new_plan is None else self.new_plan.to_dict()},
            "saved_s": self.saved_s,
            "move": {"bytes": self.move_bytes,
                     "seconds": self.move_s if math.isfinite(self.move_s) else None,
                     "lost_layers": list(self.lost_layers),
                     "transfers": [{"pipeline": t.pipeline, "stage": t.stage,
                                    "layers": [min(t.layers), max(t.layers) + 1],
                                    "from": t.source, "to": t.target, "bytes": t.bytes,
                                    "seconds": t.seconds} for t in self.transfers]},
        }


def _dc_of(instance: Instance, device: str) -> str | None:
    try:
        return instance.datacenters[instance.locate(device).dc].name
    except KeyError:
        return None


def move_cost(old_instance: Instance, old_plan: Plan, new_instance: Instance,
              new_plan: Plan) -> tuple[list[Transfer], float, float, tuple[int, ...]]:
    """The transfers that turn ``old_plan``'s placement into ``new_plan``'s (module doc).

    Parameters
    ----------
    old_instance, old_plan : Instance, Plan
        The running plan and the instance it was made for (where its devices are).
    new_instance, new_plan : Instance, Plan
        The plan to move to; paths, bandwidths and ``bytes_per_param`` are the new
        instance's.

    Returns
    -------
    tuple
        ``(transfers, bytes, seconds, lost_layers)``: every transfer, the bytes moved, the
        move's time (``inf`` when a layer's state has no holder left in the new
        instance's datacenters) and those layers.
    """
    index = {dc.name: k for k, dc in enumerate(new_instance.datacenters)}
    holders: dict[int, list[tuple[frozenset, str | None]]] = {}
    for st in old_plan.all_stages:
        where = _dc_of(old_instance, st.devices[0])
        for layer in range(st.start, st.end):
            holders.setdefault(layer, []).append((frozenset(st.devices), where))
    beta = new_instance.training.bytes_per_param

    def path_time(a: int, b: int, nbytes: float) -> float:
        bandwidth, latency = cost.path(new_instance, min(a, b), max(a, b))
        return float(cost.occupancy(nbytes, bandwidth)) + latency

    flows: dict[tuple[int, int, str, str], list[int]] = {}
    lost = []
    for p, pipe in enumerate(new_plan.pipelines):
        for s, st in enumerate(pipe.stages):
            target = _dc_of(new_instance, st.devices[0])
            mine = frozenset(st.devices)
            for layer in range(st.start, st.end):
                old = holders.get(layer, [])
                if any(devs == mine for devs, _ in old):
                    continue  # already there
                sources = [dc for _, dc in old if dc in index]
                if not sources:
                    lost.append(layer)
                    continue
                params = new_instance.layers[layer].params * beta
                source = min(sources, key=lambda dc: (path_time(index[dc], index[target],
                                                                params), index[dc]))
                flows.setdefault((p, s, source, target), []).append(layer)
    transfers, load, latency = [], {}, 0.0
    for (p, s, source, target), layers in flows.items():
        nbytes = beta * sum(float(new_instance.layers[x].params) for x in layers)
        a, b = index[source], index[target]
        transfers.append(Transfer(p, s, tuple(layers), source, target, nbytes,
                                  path_time(a, b, nbytes)))
        latency = max(latency, cost.path(new_instance, min(a, b), max(a, b))[1])
        links = [("dc", a)] if a == b else [("chain", k) for k in range(min(a, b), max(a, b))]
        for link in links:
            load[link] = load.get(link, 0.0) + nbytes
    busiest = 0.0
    for (kind, k), nbytes in load.items():
        bandwidth = (new_instance.datacenters[k].link.bandwidth_bytes_per_s if kind == "dc"
                     else new_instance.links[k].bandwidth_bytes_per_s)
        busiest = max(busiest, float(cost.occupancy(nbytes, bandwidth)))
    total = sum(t.bytes for t in transfers)
    seconds = math.inf if lost else (busiest + latency if transfers else 0.0)
    return transfers, total, seconds, tuple(lost)


def replan(instance: Instance, plan: Plan, new_instance: Instance, *,
           horizon: int = DEFAULT_HORIZON, solver: str = "dp",
           time_limit: float | None = None, result=None) -> Replan:
    """Keep ``plan`` or move to the new optimum of ``new_instance`` (see the module doc).

    Parameters
    ----------
    instance, plan : Instance, Plan
        The running plan and its instance.
    new_instance : Instance
        The changed network or devices (the same model).
    horizon : int
        Iterations the saving is counted over (``>= 1``).
    solver : str
        The solver of the new plan (``dp``: the exact optimum).
    time_limit : float, optional
        Seconds for that solve.
    result : Result, optional
        ``solver``'s result on ``new_instance`` if already solved (the online policies'
        cached solves, :meth:`chainpipe.online.offers.Planner.solve`): not solved again.

    Returns
    -------
    Replan

    Raises
    ------
    ValueError
        If the two instances have different models (a plan cannot move between them).
    """
    from .solve import solve

    if [(ly.params, ly.name) for ly in instance.layers] != \
            [(ly.params, ly.name) for ly in new_instance.layers]:
        raise ValueError(f"{new_instance.name} has another model than {instance.name}: "
                         f"a running plan moves between placements of one model")
    if horizon < 1:
        raise ValueError(f"horizon must be >= 1, got {horizon}")
    old = evaluate(instance, plan)
    on_new = evaluate(new_instance, plan)
    old_on_new = on_new.iteration_time_s if on_new.feasible else math.inf
    res = solve(new_instance, solver, time_limit=time_limit) if result is None else result
    out = Replan(old.iteration_time_s, old_on_new, tuple(on_new.violations), str(res.status),
                 res.iteration_time, res.plan, solver, horizon)
    if res.plan is None:
        out.decision = "keep" if on_new.feasible else "none"
        out.reason = (f"{solver} found no plan on the new instance ({res.status})"
                      + ("" if on_new.feasible else "; the old plan no longer runs either"))
        return out
    out.transfers, out.move_bytes, out.move_s, out.lost_layers = move_cost(
        instance, plan, new_instance, res.plan)
    if not on_new.feasible:
        out.decision = "switch"
        out.reason = (f"the old plan no longer runs ({len(on_new.violations)} rule(s) broken: "
                      f"{on_new.violations[0]})")
    elif out.saved_s > out.move_s:
        out.decision = "switch"
        out.reason = (f"{horizon} iterations x {old_on_new - res.iteration_time:.6g} s saved = "
                      f"{out.saved_s:.6g} s > the move's {out.move_s:.6g} s")
    else:
        out.decision = "keep"
        out.reason = (f"{horizon} iterations x {old_on_new - res.iteration_time:.6g} s saved = "
                      f"{out.saved_s:.6g} s <= the move's {out.move_s:.6g} s")
    return out


def format_replan(r: Replan) -> str:
    """``replan``'s table output: the old plan before and after, the new optimum, the move
    and the decision, one line each (a transfer and a broken rule indented below)."""
    def num(x, unit=" s"):
        return "-" if x is None or not math.isfinite(x) else f"{x:.6g}{unit}"

    rows = [("old plan, old instance", num(r.old_time_s)),
            ("old plan, new instance", num(r.old_on_new_s) if not r.old_violations else
             f"does not run ({len(r.old_violations)} rule(s) broken)")]
    more = [f"  {v}" for v in r.old_violations[:10]]
    if len(r.old_violations) > 10:
        more.append(f"  ... and {len(r.old_violations) - 10} more")
    rows.append(("", "\n".join(more)) if more else None)
    rows.append((f"new optimum ({r.solver})", f"{num(r.new_time_s)}  ({r.new_status})"))
    if r.new_plan is not None:
        rows.append((f"saved over {r.horizon} iterations", num(r.saved_s)))
        lost = (f" (layers {', '.join(map(str, r.lost_layers))} have no holder left: restore "
                f"from a checkpoint)") if r.lost_layers else ""
        rows.append(("move", f"{r.move_bytes / 2**30:.6g} GiB in {len(r.transfers)} "
                             f"transfer(s), {num(r.move_s)}{lost}"))
        rows.append(("", "\n".join(
            f"  p{t.pipeline} s{t.stage} layers [{min(t.layers)}, {max(t.layers) + 1}) "
            f"{t.source} -> {t.target}: {t.bytes / 2**30:.6g} GiB, {t.seconds:.6g} s alone"
            for t in r.transfers)) if r.transfers else None)
    rows.append(("decision", f"{r.decision.upper()}: {r.reason}"))
    width = max(len(k) for k, _ in filter(None, rows)) + 2
    return "\n".join(v if not k else f"{k.ljust(width)}{v}" for k, v in filter(None, rows))


__all__ = ["DEFAULT_HORIZON", "Replan", "Transfer", "format_replan", "move_cost", "replan"]
