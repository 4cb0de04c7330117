"""Which features of contract version 3 a solver handles: the one refusal rule.

Every exact route plans under version 3 (the ``period`` objective and several
pipelines): ``dp`` (``docs/dp.md``, "Version 3"), ``cdynp`` (``docs/privacy.md``), the
ILPs and CP-SAT (``docs/formulations.md``, ``docs/cpsat.md``); ``docs/model.md``, "What
a solver reports". A solver registered without a feature refuses an instance that needs
it, with one line naming it, rather than prove the optimum of another problem. The solve
facade (:func:`chainpipe.solve.unsupported`) and the CDynP owner across hosts ask
:func:`refusal`; nothing else decides it.
"""

from __future__ import annotations

from .instance import Training

#: the version-3 features each solver handles, by name; a solver not listed handles
#: none (exact) or :data:`BASELINE_FEATURES` (a baseline: see :func:`refusal`)
#: (the ILPs and CP-SAT plan several pipelines by an outer enumeration around
#: one-pipeline models: docs/formulations.md, docs/cpsat.md)
SUPPORTED: dict[str, frozenset[str]] = {
    name: frozenset({"period", "pipelines"})
    for name in ("dp", "cdynp", "ilp-assign", "ilp-path", "cpsat")}


def features(training: Training) -> dict[str, str]:
    """The version-3 features ``training`` needs beyond version 2, each with its words.

    ``"period"``: objective ``period`` with ``M > 1`` (one microbatch has no steady
    state: both objectives give the same ``T``). ``"pipelines"``: a pipeline list other
    than ``[1]``. ``pipeline_sync_period`` matters only with several pipelines, so it
    needs nothing of its own.
    """
    out = {}
    if training.objective == "period" and training.microbatches > 1:
        out["period"] = "objective 'period' (training.objective; 'classic' is supported)"
    if training.parallelism.pipelines != (1,):
        out["pipelines"] = (f"several pipelines (training.parallelism.pipelines = "
                            f"{list(training.parallelism.pipelines)}; [1] is supported)")
    return out


#: the version-3 features every baseline handles (:func:`refusal`)
BASELINE_FEATURES = frozenset({"period", "pipelines"})


def refusal(training: Training, solver: str, exact: bool = True) -> str | None:
    """Why ``solver`` cannot solve an instance of this ``training`` yet, or ``None``.

    Parameters
    ----------
    training : Training
        The instance's training block.
    solver : str
        The solver's registered name (its entry in :data:`SUPPORTED`, if any).
    exact : bool, default True
        Whether the solver proves optima. A baseline (``False``) handles
        :data:`BASELINE_FEATURES`: it runs under ``period`` (its plan is a heuristic whose
        ``T`` the cost model computes under the instance's objective, and feasibility does
        not depend on the objective) and when several pipelines are allowed (it returns
        a plan of one pipeline unless designed for several; where 1 is not an allowed
        count that plan is refused as infeasible, status ``error``).

    Returns
    -------
    str or None
        ``"<solver> does not support contract version 3 yet: <what>"``, one line.
    """
    handled = SUPPORTED.get(solver, frozenset() if exact else BASELINE_FEATURES)
    missing = [words for name, words in features(training).items() if name not in handled]
    if not missing:
        return None
    return f"{solver} does not support contract version 3 yet: {'; '.join(missing)}"
