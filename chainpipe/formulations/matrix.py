"""A PuLP model as sparse arrays, the one form every MIP backend is given.

The formulations build their models with PuLP expressions (readable, one method per
constraint family); :func:`to_matrix` turns the result into :class:`LinearModel`
arrays, checking the deadline as it goes. HiGHS takes the arrays in one call
(``passModel``) and writes the MPS file CBC reads, so PuLP never writes a model
file nor passes a model one row at a time.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: non-zeros converted between two deadline checks
CHECK_EVERY = 20000


def import_pulp():
    """PuLP, imported the first time on a thread of its own.

    PuLP keeps at module level the exception of an optional solver's failed import
    (``pulp.apis.cplex_api.err``), and with its traceback every frame on the stack at
    that moment, their locals included: imported from a builder, it kept the whole built
    model alive until exit (hundreds of MB, 0.5-0.7 s to tear down). A thread's stack
    holds nothing of ours.
    """
    import importlib
    import sys
    import threading

    if "pulp" not in sys.modules:
        loader = threading.Thread(target=importlib.import_module, args=("pulp",),
                                  name="import-pulp")
        loader.start()
        loader.join()
    return importlib.import_module("pulp")


@dataclass
class LinearModel:
    """``min cost @ x`` s.t. ``row_lower <= A x <= row_upper``, ``col_lower <= x <= col_upper``.

    ``A`` is in compressed row form (``starts``, ``index``, ``value``); ``integer``
    marks the integer columns. ``variables`` are the PuLP variables in column order,
    so a solution vector can be written back with :meth:`assign`.
    """

    cost: np.ndarray
    col_lower: np.ndarray
    col_upper: np.ndarray
    integer: np.ndarray  # bool
    row_lower: np.ndarray
    row_upper: np.ndarray
    starts: np.ndarray  # int32, num_rows + 1 entries
    index: np.ndarray  # int32
    value: np.ndarray
    offset: float
    variables: list
    #: a MIP start (one value per column), or ``None``
    start: np.ndarray | None = None

    @property
    def num_cols(self) -> int:
        return int(self.cost.shape[0])

    @property
    def num_rows(self) -> int:
        return int(self.row_lower.shape[0])

    @property
    def nonzeros(self) -> int:
        return int(self.index.shape[0])

    def stats(self) -> dict:
        """Model size as the solvers report it."""
        return {"variables": self.num_cols, "constraints": self.num_rows,
                "nonzeros": self.nonzeros, "integer_variables": int(self.integer.sum())}

    def out_of_range(self, limit: float) -> str | None:
        """What breaks ``|coefficient| < limit`` (non-finite included), or ``None``.

        Infinite bounds are allowed (a free side); finite ones must be below ``limit``.
        """
        for label, arr in (("an objective coefficient", self.cost),
                           ("a matrix entry", self.value)):
            bad = ~(np.abs(arr) < limit)
            if bad.any():
                return f"{label} is {arr[bad][0]:.3g}"
        for label, arr in (("a row bound", np.concatenate([self.row_lower, self.row_upper])),
                           ("a column bound", np.concatenate([self.col_lower, self.col_upper]))):
            bad = np.isnan(arr) | ((np.abs(arr) >= limit) & np.isfinite(arr))
            if bad.any():
                return f"{label} is {arr[bad][0]:.3g}"
        return None

    def assign(self, values) -> None:
        """Write a solution (one value per column) back into the PuLP variables."""
        for var, v in zip(self.variables, values):
            var.varValue = float(v)


def no_check() -> None:
    """The ``check`` of a build without a deadline."""


class Columns:
    """The variables of a formulation in creation order (PuLP does not keep them).

    Parameters
    ----------
    problem : pulp.LpProblem
        The model the variables belong to.
    """

    def __init__(self, problem):
        self.problem = problem
        self.variables: list = []

    def __call__(self, name: str, low=None, up=None, cat: str = "Continuous"):
        """A new variable, recorded as the next column."""
        v = self.problem.add_variable(name, low, up, cat=cat)
        self.variables.append(v)
        return v


def to_matrix(problem, variables: list, check=None) -> LinearModel:
    """The arrays of a PuLP minimisation ``problem`` whose columns are ``variables``.

    Parameters
    ----------
    problem : pulp.LpProblem
        A minimisation problem.
    variables : list of pulp.LpVariable
        Every variable the problem uses, in column order (:class:`Columns` keeps them).
    check : callable, optional
        Called every :data:`CHECK_EVERY` non-zeros (``Deadline.check``: raises to stop).

    Returns
    -------
    LinearModel

    Raises
    ------
    ValueError
        If the problem maximises, or uses a variable not in ``variables``.
    """
    if problem.sense != 1:  # pulp.LpMinimize
        raise ValueError("to_matrix takes minimisation problems only")
    column = {id(v): n for n, v in enumerate(variables)}
    n = len(variables)
    inf = np.inf
    col_lower = np.array([-inf if v.lowBound is None else v.lowBound for v in variables], float)
    col_upper = np.array([inf if v.upBound is None else v.upBound for v in variables], float)
    integer = np.array([v.cat == "Integer" for v in variables], dtype=bool)
    cost = np.zeros(n)
    objective = problem.objective
    offset = 0.0
    if objective is not None:
        offset = float(objective.constant)
        for v, c in objective.items():
            cost[_column(column, v)] += c
    constraints = problem.constraints()
    row_lower = np.empty(len(constraints))
    row_upper = np.empty(len(constraints))
    starts = [0]
    index: list[int] = []
    value: list[float] = []
    next_check = 0
    for r, con in enumerate(constraints):
        if check is not None and len(index) >= next_check:
            check()
            next_check = len(index) + CHECK_EVERY
        lo, up = con.getLb(), con.getUb()
        row_lower[r] = -inf if lo is None else lo
        row_upper[r] = inf if up is None else up
        for v, c in con.items():
            if c != 0:
                index.append(_column(column, v))
                value.append(c)
        starts.append(len(index))
    return LinearModel(cost, col_lower, col_upper, integer, row_lower, row_upper,
                       np.asarray(starts, dtype=np.int32), np.asarray(index, dtype=np.int32),
                       np.asarray(value, dtype=float), offset, list(variables))


def _column(column: dict, var) -> int:
    try:
        return column[id(var)]
    except KeyError:
        raise ValueError(f"variable {var.name!r} is not a recorded column") from None
