"""Comparison metrics, the way the optimisation community reports them.

Definitions (each stated again in the captions of the report):

- **gap** (to the solver's own bound): ``(T - bound) / T``, the one gap of
  :class:`chainpipe.result.Result`.
- **best known** ``T*`` of an instance: the least ``T`` any run of the sweep
  found; it is *proven* optimal when some run proved optimality or some run's
  lower bound reaches it (within :data:`WIN_RTOL`).
- **gap to best**: ``(T - T*) / T*``, relative to the best known.
- **wins**: runs whose ``T <= T* (1 + WIN_RTOL)``.
- **finished**: a run that ended on its own, within its time limit, with its
  final answer: ``optimal`` or ``infeasible`` (proven), or, for a heuristic
  (a solver that does not prove optimality), ``feasible``. An exact solver that
  stopped with ``feasible`` did not finish its job.
- **shifted geometric mean** of solve times, shift :data:`SHIFT_S`: runs that
  did not finish are charged the time limit.
- **performance profiles** (Dolan & More 2002): for each problem (instance,
  seed) the ratio of a solver's measure to the best solver's, and the fraction
  of problems each solver has within a factor ``tau``. On solve time (finished
  runs only; times below :data:`TIME_FLOOR_S` counted as that floor, which is
  timer noise) and on plan quality (``T / T*``).
- **primal integral** (Berthold 2013): the integral over ``[0, time limit]`` of
  the primal gap ``(T(t) - T*) / T(t)`` of the incumbent at time ``t`` (1 while
  there is none). Solvers that report an anytime trace (``stats["trace"]``:
  ``[t, incumbent, bound]`` rows) contribute every incumbent; the others their
  final plan from the moment they return it.
"""

from __future__ import annotations

import math
from collections import defaultdict

SHIFT_S = 1.0
WIN_RTOL = 1e-6
TIME_FLOOR_S = 0.01
#: a run counts as within its limit up to this relative slack (timer and start-up noise)
LIMIT_SLACK = 0.02


# --------------------------------------------------------------------------- small pieces
def shifted_geometric_mean(values, shift: float = SHIFT_S) -> float | None:
    """``exp(mean(log(v + shift))) - shift``; ``None`` for no values."""
    vals = [float(v) for v in values]
    if not vals:
        return None
    return math.exp(sum(math.log(v + shift) for v in vals) / len(vals)) - shift


def problem_key(rec: dict) -> tuple[str, int]:
    return (rec["instance_path"], int(rec.get("seed", 0)))


def within_limit(rec: dict) -> bool:
    limit = rec.get("time_limit_s")
    if limit is None:
        return True
    return float(rec["solve_time_s"]) <= float(limit) * (1 + LIMIT_SLACK) + 0.05


def finished(rec: dict) -> bool:
    """Did the run end on its own, in time, with its final answer (see module doc)?"""
    if rec.get("stats", {}).get("killed") or not within_limit(rec):
        return False
    status = rec["status"]
    if status in ("optimal", "infeasible"):
        return True
    return status == "feasible" and not rec.get("exact", False)


#: a run without a plan that ended before this share of its limit gave up (it said it has
#: none), rather than ran out of time
GAVE_UP_SHARE = 0.9


def gave_up(rec: dict) -> bool:
    """Did the run end on its own without a plan, well before its limit?

    A heuristic that finds no candidate (``"no candidate fits memory"``) stops at once
    with ``no_solution``; an exact solver that runs out of time stops at its limit. The
    means still charge both the limit (MIPLIB's rule: neither finished with an answer),
    but the reports say apart which runs gave up and why.
    """
    if rec["status"] != "no_solution" or rec.get("stats", {}).get("killed"):
        return False
    limit = rec.get("time_limit_s")
    return limit is None or float(rec["solve_time_s"]) < GAVE_UP_SHARE * float(limit)


def charged_time(rec: dict) -> float:
    """Solve time for the means: own time if finished, else the time limit."""
    limit = rec.get("time_limit_s")
    if finished(rec) or limit is None:
        return float(rec["solve_time_s"])
    return float(limit)


# --------------------------------------------------------------------------- best known
def best_known(records: list[dict]) -> dict[str, dict]:
    """Per instance path: ``best`` T*, ``proven``, ``solver`` that found it, ``infeasible``,
    ``best_bound`` and ``conflicts`` (claims contradicted by another run)."""
    by_inst: dict[str, list[dict]] = defaultdict(list)
    for rec in records:
        by_inst[rec["instance_path"]].append(rec)
    out = {}
    for path, recs in by_inst.items():
        with_t = [r for r in recs if r.get("iteration_time_s") is not None]
        best_rec = min(with_t, key=lambda r: r["iteration_time_s"]) if with_t else None
        best = best_rec["iteration_time_s"] if best_rec else None
        bounds = [r["lower_bound_s"] for r in recs if r.get("lower_bound_s") is not None]
        best_bound = max(bounds) if bounds else None
        conflicts = []
        proven = False
        if best is not None:
            for r in recs:
                if r["status"] == "optimal" and r["iteration_time_s"] > best * (1 + WIN_RTOL):
                    conflicts.append(
                        f"{r['solver']} (seed {r.get('seed', 0)}) claims optimal "
                        f"T = {r['iteration_time_s']:.9g} s but {best_rec['solver']} found "
                        f"T = {best:.9g} s")
                if r["status"] == "infeasible":
                    conflicts.append(f"{r['solver']} claims infeasible but {best_rec['solver']} "
                                     f"found a plan")
                if r.get("lower_bound_s") is not None and \
                        r["lower_bound_s"] > best * (1 + WIN_RTOL):
                    conflicts.append(f"{r['solver']} bound {r['lower_bound_s']:.9g} s exceeds "
                                     f"the best plan's T = {best:.9g} s")
            proven = any(r["status"] == "optimal" and r["iteration_time_s"] <= best * (1 + WIN_RTOL)
                         for r in recs) or (best_bound is not None
                                            and best_bound >= best * (1 - WIN_RTOL))
        infeasible = best is None and any(r["status"] == "infeasible" for r in recs)
        out[path] = {"best": best, "proven": proven,
                     "solver": best_rec["solver"] if best_rec else None,
                     "infeasible": infeasible, "best_bound": best_bound,
                     "conflicts": conflicts}
    return out


def gap_to_best(T: float | None, best: float | None) -> float | None:
    """``(T - T*) / T*``; ``None`` without a plan or a best known."""
    if T is None or best is None or best <= 0:
        return None
    return max(0.0, (T - best) / best)


def annotate(records: list[dict]) -> list[dict]:
    """Copies of ``records`` with ``gap_to_best``, ``best_known_s``, ``win``, ``finished``."""
    best = best_known(records)
    out = []
    for rec in records:
        b = best[rec["instance_path"]]
        r = dict(rec)
        r["best_known_s"] = b["best"]
        r["best_proven"] = b["proven"]
        r["gap_to_best"] = gap_to_best(rec.get("iteration_time_s"), b["best"])
        r["win"] = (rec.get("iteration_time_s") is not None and b["best"] is not None
                    and rec["iteration_time_s"] <= b["best"] * (1 + WIN_RTOL))
        r["finished"] = finished(rec)
        out.append(r)
    return out


# --------------------------------------------------------------------------- anytime
def incumbent_steps(rec: dict) -> list[tuple[float, float | None, float | None]]:
    """``(t, incumbent T, bound)`` from the run's trace, closed by its final answer."""
    steps = []
    for row in rec.get("stats", {}).get("trace") or []:
        if not isinstance(row, (list, tuple)) or len(row) < 2:
            continue
        t = row[0]
        inc = row[1]
        bound = row[2] if len(row) > 2 else None
        if t is None:
            continue
        steps.append((float(t), None if inc is None else float(inc),
                      None if bound is None else float(bound)))
    steps.sort(key=lambda s: s[0])
    if rec.get("iteration_time_s") is not None and not rec.get("stats", {}).get("killed"):
        steps.append((float(rec["solve_time_s"]), float(rec["iteration_time_s"]),
                      rec.get("lower_bound_s")))
    return steps


def primal_gap(incumbent: float | None, best: float | None) -> float:
    """Berthold's primal gap ``(T - T*) / T`` in ``[0, 1]``; 1 without an incumbent."""
    if incumbent is None or best is None:
        return 1.0
    if incumbent <= 0:
        return 0.0
    return min(1.0, max(0.0, (incumbent - best) / incumbent))


def primal_integral(rec: dict, best: float | None, horizon: float | None = None) -> float | None:
    """Integral of the primal gap over ``[0, horizon]`` (default: the run's time limit), s."""
    if best is None:
        return None
    horizon = float(horizon if horizon is not None else rec.get("time_limit_s") or
                    rec["solve_time_s"])
    total, t_prev, inc = 0.0, 0.0, None
    for t, value, _ in incumbent_steps(rec):
        t = min(max(t, 0.0), horizon)
        total += primal_gap(inc, best) * (t - t_prev)
        t_prev = t
        if value is not None:
            inc = value if inc is None else min(inc, value)
    total += primal_gap(inc, best) * (horizon - t_prev)
    return total


def gap_curves(records: list[dict]) -> list[dict]:
    """Rows ``solver, instance, seed, t, primal_gap, own_gap`` for runs with a trace."""
    best = best_known(records)
    rows = []
    for rec in records:
        if not rec.get("stats", {}).get("trace"):
            continue
        b = best[rec["instance_path"]]["best"]
        inc = None
        for t, value, bound in incumbent_steps(rec):
            if value is not None:
                inc = value if inc is None else min(inc, value)
            own = None
            if inc is not None and bound is not None and inc > 0:
                own = max(0.0, (inc - bound) / inc)
            rows.append({"solver": rec["solver"], "instance": rec["instance"],
                         "seed": rec.get("seed", 0), "t": t,
                         "primal_gap": primal_gap(inc, b), "own_gap": own})
    return rows


# --------------------------------------------------------------------------- profiles
def performance_profile(records: list[dict], measure: str = "time") -> dict:
    """Dolan-More profile data: per solver the sorted ratios to the best solver.

    Parameters
    ----------
    records : list of dict
        Run records of a sweep; a problem is an (instance, seed) pair.
    measure : {"time", "quality"}
        ``"time"``: solve time of finished runs (floored at
        :data:`TIME_FLOOR_S`); ``"quality"``: ``T / T*``. For quality, a
        problem on which no run has a plan (an infeasible instance, or one no
        solver solved) has no ratio for anyone and is left out, listed under
        ``left_out``; otherwise it would cap every curve below 1.

    Returns
    -------
    dict
        ``{"measure", "problems", "ratios": {solver: sorted ratios, inf where the
        solver has none}, "left_out": [(instance path, seed), ...]}``;
        ``problems`` counts the problems profiled.
    """
    by_problem: dict[tuple, dict[str, dict]] = defaultdict(dict)
    solvers = []
    for rec in records:
        by_problem[problem_key(rec)][rec["solver"]] = rec
        if rec["solver"] not in solvers:
            solvers.append(rec["solver"])
    ratios: dict[str, list[float]] = {s: [] for s in solvers}
    left_out = []
    for key, runs in sorted(by_problem.items()):
        vals = {s: _measure(runs.get(s), measure) for s in solvers}
        best = min(vals.values())
        if measure == "quality" and not math.isfinite(best):
            left_out.append(key)
            continue
        for s in solvers:
            if math.isfinite(best) and math.isfinite(vals[s]) and best > 0:
                ratios[s].append(vals[s] / best)
            elif math.isfinite(best) and best == 0 and vals[s] == 0:
                ratios[s].append(1.0)
            else:
                ratios[s].append(math.inf)
    return {"measure": measure, "problems": len(by_problem) - len(left_out),
            "ratios": {s: sorted(v) for s, v in ratios.items()}, "left_out": left_out}


def _measure(rec: dict | None, measure: str) -> float:
    """A run's value for the profile: ``inf`` when it has none."""
    if rec is None:
        return math.inf
    if measure == "time":
        return max(float(rec["solve_time_s"]), TIME_FLOOR_S) if finished(rec) else math.inf
    return rec["iteration_time_s"] if rec.get("iteration_time_s") is not None else math.inf


def profile_curve(ratios: list[float], taus: list[float]) -> list[float]:
    """Fraction of problems with ratio ``<= tau`` for each ``tau``."""
    n = len(ratios)
    return [sum(1 for r in ratios if r <= tau * (1 + 1e-12)) / n if n else 0.0 for tau in taus]


# --------------------------------------------------------------------------- per solver
def solver_summary(records: list[dict]) -> list[dict]:
    """One row of metrics per solver, in first-seen order (see the module doc)."""
    recs = annotate(records)
    best = best_known(records)
    order: list[str] = []
    for r in recs:
        if r["solver"] not in order:
            order.append(r["solver"])
    rows = []
    for s in order:
        mine = [r for r in recs if r["solver"] == s]
        statuses = defaultdict(int)
        for r in mine:
            statuses[r["status"]] += 1
        gaps_best = [r["gap_to_best"] for r in mine if r["gap_to_best"] is not None]
        gaps_own = [r["gap"] for r in mine if r.get("gap") is not None]
        integrals = [primal_integral(r, best[r["instance_path"]]["best"]) for r in mine
                     if best[r["instance_path"]]["best"] is not None]
        rows.append({
            "solver": s,
            "exact": bool(mine[0].get("exact", False)),
            "runs": len(mine),
            "optimal": statuses["optimal"],
            "feasible": statuses["feasible"],
            "infeasible": statuses["infeasible"],
            "no_solution": statuses["no_solution"],
            "gave_up": sum(1 for r in mine if gave_up(r)),
            "error": statuses["error"],
            "finished": sum(1 for r in mine if r["finished"]),
            "wins": sum(1 for r in mine if r["win"]),
            "mean_gap_to_best": sum(gaps_best) / len(gaps_best) if gaps_best else None,
            "max_gap_to_best": max(gaps_best) if gaps_best else None,
            "mean_gap": sum(gaps_own) / len(gaps_own) if gaps_own else None,
            "sgm_time_s": shifted_geometric_mean([charged_time(r) for r in mine]),
            "mean_primal_integral_s": (sum(integrals) / len(integrals)) if integrals else None,
            "traced_runs": sum(1 for r in mine if r.get("stats", {}).get("trace")),
        })
    return rows
