"""Plans as a training framework reads them: rank layouts, Megatron-Core, TorchTitan.

    from chainpipe.export import export
    text = export(instance, plan, "megatron")

:func:`export` checks the plan against the instance (the cost model's
:func:`~chainpipe.plan.evaluate`), then writes the format: ``ranks`` (JSON, or
CSV) expresses every valid plan; ``megatron`` and ``torchtitan`` express the
plans whose stages share one data-parallel width and one tensor-parallel
degree and whose cuts fall between whole transformer blocks. For any other
plan :class:`Inexpressible` says why and carries the best plan the format can
express (:func:`~chainpipe.export.nearest.nearest_plan`) with its ``T``.
"""

from __future__ import annotations

from ..instance import Instance, InstanceError
from ..plan import Plan, evaluate
from .frameworks import megatron_arguments, torchtitan_config
from .nearest import Inexpressible, expressible_problem, nearest_plan
from .ranks import rank_rows, ranks_csv, ranks_json

#: the formats of :func:`export`
FORMATS = ("ranks", "megatron", "torchtitan")


def export(instance: Instance, plan: Plan, fmt: str, *, csv: bool = False) -> str:
    """The text of ``plan`` in the format ``fmt``.

    Parameters
    ----------
    instance : Instance
        The instance the plan is for.
    plan : Plan
        A feasible plan of ``instance``.
    fmt : {"ranks", "megatron", "torchtitan"}
        ``ranks``: one entry per global rank (device, stage, data- and
        tensor-parallel rank, layers); ``megatron``: Megatron-Core's arguments
        with ``--pipeline-model-parallel-layout``; ``torchtitan``: a TorchTitan
        job configuration (TOML) with the modules of each pipeline stage.
    csv : bool, default False
        ``ranks`` only: CSV instead of JSON.

    Returns
    -------
    str

    Raises
    ------
    InstanceError
        The plan does not fit the instance (each violation on its own line).
    Inexpressible
        ``fmt`` cannot express this plan; the exception names why and the best
        plan it can express, with its ``T``.
    ValueError
        An unknown format.
    """
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; known: {', '.join(FORMATS)}")
    ev = evaluate(instance, plan)
    if not ev.feasible:
        raise InstanceError([f"plan: {v}" for v in ev.violations])
    if fmt == "ranks":
        rows = rank_rows(instance, plan)
        return ranks_csv(rows) if csv else ranks_json(instance, plan, ev, rows)
    if why := expressible_problem(instance, plan):
        raise Inexpressible(fmt, why, nearest_plan(instance), ev.iteration_time_s)
    if fmt == "megatron":
        return megatron_arguments(instance, plan, ev)
    return torchtitan_config(instance, plan, ev)


__all__ = ["FORMATS", "Inexpressible", "export", "nearest_plan"]
