"""CBC (the binary PuLP bundles) run as a child that dies with the solve.

HiGHS writes the model as MPS (fast, in C++) into a private temporary directory;
CBC reads it and writes its solution there; the directory is removed on every way
out. CBC runs through :func:`chainpipe.solvers.child.run_child` (own session, killed
with chainpipe, asked to stop at the deadline); its output streams to ``log``. The
status comes from the first line of the solution file CBC writes before it exits; the
bound of a stopped run from its output. A run that may have met its time limit or a
signal proves nothing CBC 2.10 might have claimed on the way out (:func:`_answer`).
"""

from __future__ import annotations

import math
import re
import shutil
import tempfile
import time
import warnings
from decimal import Decimal, InvalidOperation
from pathlib import Path

import numpy as np

from ..deadline import Deadline
from .child import STOP_EARLY, run_child
from .mip import ABS_GAP, PRIMAL_TOL, MipAnswer, backend_seconds, pass_model

_RESULT = re.compile(r"^Result - (.*)$", re.M)
_NUMBER = r"\s*:?\s*([-+0-9.eE]+|-?inf(?:inity)?)"


def cbc_path() -> str:
    """The CBC binary PuLP bundles."""
    import pulp

    with warnings.catch_warnings():  # PuLP 3.3 deprecates the bundled CBC's class name
        warnings.simplefilter("ignore", DeprecationWarning)
        return pulp.PULP_CBC_CMD().path


def cbc_options(relax: bool, limit: float | None, seed: int, threads: int) -> list[str]:
    """CBC's command-line options after the model file name."""
    # CBC seeds must be positive (0 means "from the clock"), hence seed + 1.
    # preprocess off: CBC 2.10's preprocessing returns wrong "optimal" answers on
    # some of our models (seen on a one-slot assignment model; cf. coin-or/Cbc#283,
    # #724); the cross-check tests would fail with it on. Mixed-integer rounding,
    # two-step MIR and flow-cover cuts off: with them CBC 2.10 claimed a bound 3.4% above
    # the true optimum on the v2 assignment model of hybrid-small-02 (seed 1; turning
    # any one of the three off gave the right optimum).
    opts = ["-preprocess", "off", "-mixed", "off", "-twoMir", "off", "-flow", "off",
            "-randomCbcSeed", str(int(seed) + 1),
            "-randomSeed", str(int(seed) + 1), "-increment", "1e-12",
            "-primalTolerance", repr(PRIMAL_TOL), "-ratio", "0", "-allow", repr(ABS_GAP),
            "-threads", str(max(1, int(threads)))]
    if limit is not None:  # never 0: CBC reads "-sec 0" as no limit
        opts += ["-sec", repr(max(float(limit), 0.01)), "-timeMode", "elapsed"]
    return opts + ["-initialSolve" if relax else "-solve", "-printingOptions", "normal"]


#: CBC's progress lines: a new incumbent, and the nodes' best solution and bound
_FOUND = re.compile(r"Cbc00(?:04|12)I Integer solution of\s+(" + r"[-+0-9.eE]+" + r")")
_NODES = re.compile(r"Cbc0010I After .* ([-+0-9.eE]+) best solution, best possible "
                    r"([-+0-9.eE]+)")


def _bounds_reader(on_bounds, log):
    """A log function that tells ``on_bounds`` of CBC's incumbents and bounds, then passes
    each line on to ``log``."""
    def feed(line: str) -> None:
        try:
            if m := _FOUND.search(line):
                on_bounds(float(m.group(1)), None)
            elif m := _NODES.search(line):
                on_bounds(float(m.group(1)), float(m.group(2)))
        except ValueError:
            pass
        if log is not None:
            log(line)

    return feed


def solve_cbc(model, *, relax: bool, deadline: Deadline, seed: int = 0, threads: int = 1,
              log=None, on_bounds=None) -> MipAnswer:
    """Solve ``model`` (a :class:`~chainpipe.formulations.matrix.LinearModel`) with CBC.

    Parameters
    ----------
    model : LinearModel
        The scaled model.
    relax : bool
        Solve the LP relaxation only.
    deadline : Deadline
        CBC gets ``deadline.backend_limit()`` seconds, is asked to stop just after the
        deadline and killed soon after.
    seed, threads : int
        CBC's random seeds (``seed + 1``) and threads.
    log : callable, optional
        Receives each line CBC prints.
    on_bounds : callable, optional
        Called as ``on_bounds(incumbent, bound)`` (the model's objective, ``None`` when
        not known) as CBC's log reports them.

    Returns
    -------
    MipAnswer
    """
    import highspy

    workdir = Path(tempfile.mkdtemp(prefix="chainpipe-cbc-"))
    try:
        mps, sol = workdir / "model.mps", workdir / "model.sol"
        h = highspy.Highs()
        h.setOptionValue("output_flag", False)
        pass_model(h, model, relax=False)
        h.writeModel(str(mps))
        del h
        deadline.check()  # writing counts: do not start CBC with nothing left
        limit = backend_seconds(deadline)
        args = [cbc_path(), str(mps)] + cbc_options(relax, limit, seed, threads) \
            + ["-solution", str(sol)]
        if on_bounds is not None:
            log = _bounds_reader(on_bounds, log)
        start = time.monotonic()
        code, lines = run_child(args, deadline=deadline, log=log)
        limited = _maybe_limited(code, start, time.monotonic(), limit, deadline)
        text = "\n".join(lines)
        solution = sol.read_text() if sol.exists() else ""
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return _answer(text, solution, model, relax, code, limited=limited)


def _maybe_limited(code: int, start: float, end: float, limit: float | None,
                   deadline: Deadline) -> bool:
    """Whether a CBC run started at ``start`` and ended at ``end`` (monotonic seconds) may
    have met a limit: a signal's exit code, its own time limit (its clock starts after
    ``start``, so a run shorter than ``limit`` never reached it) or the point at which
    :func:`~chainpipe.solvers.child.run_child` asks it to stop (``STOP_EARLY`` before the
    deadline)."""
    if code != 0:
        return True
    if limit is not None and end - start >= limit:
        return True
    return not deadline.unlimited and end >= deadline.at - STOP_EARLY


def _value(text: str, label: str) -> float | None:
    m = re.search(r"^" + re.escape(label) + _NUMBER, text, re.M | re.I)
    if not m:
        return None
    try:
        return float(m.group(1))
    except ValueError:
        return None


def read_solution(solution: str, num_cols: int):
    """``(first line, column values)`` of a CBC solution file on an HiGHS-written MPS.

    HiGHS names the columns ``c0, c1, ...``; columns CBC leaves out are 0.
    """
    lines = solution.splitlines()
    head = lines[0].strip() if lines else ""
    values = np.zeros(num_cols)
    for line in lines[1:]:
        parts = line.split()
        if parts and parts[0] == "**":
            parts = parts[1:]
        if len(parts) >= 3 and parts[1].startswith("c") and parts[1][1:].isdigit():
            col = int(parts[1][1:])
            if col < num_cols:
                values[col] = float(parts[2])
    return head, values


#: CBC's ``Result`` lines that claim no solution exists
_NO_SOLUTION = ("problem proven infeasible", "linear relaxation infeasible")
#: CBC 2.10 prints this when its root LP re-solve is not proven optimal: when the root
#: is infeasible (also after bounds were tightened), but also when the time limit or
#: Ctrl-C stopped it; the run then reports "Linear relaxation infeasible" (or "Optimal
#: solution found" if a heuristic had a solution), which proves nothing
_ROOT_NOT_SOLVED = "The LP relaxation is infeasible or too expensive"


def _answer(log: str, solution: str, model, relax: bool, code: int, *,
            limited: bool = False) -> MipAnswer:
    """CBC's answer, read from its solution file first and its log second.

    The solution file is written by CBC itself before it exits; its first line
    (``Optimal - objective value ...``, ``Stopped on time - objective value ...``,
    ``Infeasible - ...``) decides the status. The streamed log adds the bound of a
    stopped run and confirms the file; a log that arrived incomplete (it streams
    through a pseudo-terminal) never turns a proven optimum into "no plan".

    Only the final status is read (``Result - ...``; without it the file's first line),
    never a word elsewhere in the log (a heuristic's sub-problem may be infeasible). A
    run that may have met a limit (``limited``, or a nonzero exit code) proves nothing
    unless its whole log arrived and shows a completed search: CBC 2.10 calls a root LP
    stopped by the time limit or a signal "infeasible" (:data:`_ROOT_NOT_SOLVED`).
    """
    head, values = read_solution(solution, model.num_cols)
    result = _RESULT.findall(log)
    text = result[-1].strip() if result else (head or f"CBC ended with code {code}")
    lowered, first = log.lower(), head.lower()
    trusted = not (limited or code != 0) or (bool(result) and _ROOT_NOT_SOLVED not in log)
    if result:
        infeasible = text.lower() in _NO_SOLUTION
    else:
        infeasible = first.startswith("infeasible") or first.startswith("integer infeasible")
    infeasible = infeasible and trusted
    if relax:
        if infeasible:
            return MipAnswer("infeasible", None, None, text)
        value = _head_objective(head) if first.startswith("optimal") else None
        return MipAnswer("relaxed", value, None, "LP optimal" if value is not None else text)
    if infeasible:
        return MipAnswer("infeasible", None, None, text)
    objective = _value(log, "Objective value")
    if objective is None:
        objective = _head_objective(head)
    found = objective is not None and "no feasible solution found" not in lowered \
        and "objective value" in first and "no integer solution" not in first
    proven = text.startswith("Optimal solution found") or (not result and first.startswith("optimal"))
    if proven and found and trusted:
        # CBC stops only when its bound >= objective - allowable gap; the log prints
        # 8 digits, the objective of the solution read back is exact
        exact = float(model.cost @ values + model.offset)
        return MipAnswer("optimal", min(objective, exact) - ABS_GAP, values, text)
    bound = _printed_bound(log) if trusted or _ROOT_NOT_SOLVED not in log else None
    return MipAnswer("stopped", bound, values if found else None, text)


def _printed_bound(log: str) -> float | None:
    """The ``Lower bound`` CBC prints for a stopped run, less half a unit of its last
    printed digit (CBC rounds it to 3 decimals: printed, a bound equal to the optimum
    can read above it); ``None`` when absent or not finite."""
    m = re.search(r"^Lower bound" + _NUMBER, log, re.M | re.I)
    if not m:
        return None
    try:
        printed = Decimal(m.group(1))
    except InvalidOperation:
        return None
    if not printed.is_finite():
        return None
    return float(printed) - 0.5 * 10.0 ** printed.as_tuple().exponent


def _head_objective(head: str) -> float | None:
    """The objective on the first line of CBC's solution file, if it names one."""
    m = re.search(r"objective value\s+([-+0-9.eE]+)", head, re.I)
    if not m:
        return None
    try:
        value = float(m.group(1))
    except ValueError:
        return None
    return value if math.isfinite(value) else None
