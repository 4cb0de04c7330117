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
A plan of several pipelines (contract version 3) is written by ``ranks``, its
ranks numbered pipeline by pipeline; ``megatron`` and ``torchtitan`` launch one
pipeline per job and refuse it with one line (:class:`Unsupported`).
"""

from __future__ import annotations

from ..instance import Instance, InstanceError
from ..plan import Plan, evaluate
from .frameworks import megatron_arguments, module_names_problem, torchtitan_config
from .nearest import Inexpressible, expressible_problem, nearest_plan
from .ranks import rank_rows, ranks_csv, ranks_json

#: the formats of :func:`export`
FORMATS = ("ranks", "megatron", "torchtitan")


#: the formats that write a batch size, and so need ``microbatch_size``
BATCH_FORMATS = ("megatron", "torchtitan")


def batch_size(instance: Instance, plan: Plan, given: int | None = None) -> int:
    """Sequences per microbatch for a launch of ``plan``: the instance's
    ``training.microbatch_size``, or ``given`` when the instance does not state it.

    Raises
    ------
    InstanceError
        Neither states it; both do and differ; or a stage's ``d`` does not divide it
        (each replica must take whole sequences of every microbatch).
    """
    stated = instance.training.microbatch_size
    if stated is None and given is None:
        raise InstanceError(["training.microbatch_size: missing; the instance does not say how "
                             "many sequences a microbatch holds: give --microbatch-size B"])
    if stated is not None and given is not None and given != stated:
        raise InstanceError([f"--microbatch-size: {given} differs from the instance's "
                             f"training.microbatch_size ({stated}), which its figures are for"])
    size = stated if stated is not None else given
    widths = sorted({st.data_parallel for st in plan.all_stages if size % st.data_parallel})
    if widths:
        raise InstanceError([f"--microbatch-size: {size} sequences cannot be split evenly over "
                             f"{widths[0]} data-parallel replicas (a stage's d)"])
    return size


class Unsupported(RuntimeError):
    """A format cannot be written for this model or plan (one line saying why)."""


def several_pipelines_problem(plan: Plan, fmt: str) -> str | None:
    """Why ``fmt`` (``megatron``, ``torchtitan``) cannot write ``plan``, a plan of several
    pipelines, or ``None`` for a plan of one.

    Both frameworks run one pipeline per job with one data-parallel size; pipelines of
    different cuts and microbatch counts averaging gradients across DCs are not a launch
    either writes.
    """
    if plan.num_pipelines == 1:
        return None
    counts = "+".join(str(p.microbatches) for p in plan.pipelines)
    return (f"{fmt} launches one pipeline per job, and this plan runs {plan.num_pipelines} "
            f"({counts} microbatches) averaging gradients across DCs: export --to ranks "
            f"writes every pipeline's ranks")


def export(instance: Instance, plan: Plan, fmt: str, *, csv: bool = False,
           microbatch_size: int | None = None, module_names: str | None = None) -> str:
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
    microbatch_size : int, optional
        Sequences per microbatch when the instance does not state
        ``training.microbatch_size`` (``megatron`` and ``torchtitan`` write batch sizes
        from it: :func:`batch_size`).
    module_names : {"llama"}, optional
        ``torchtitan`` only: write the Llama-style module names even for a model not
        recognised as of that family (:func:`~chainpipe.export.frameworks.module_names_problem`).

    Returns
    -------
    str

    Raises
    ------
    InstanceError
        The plan does not fit the instance (each violation on its own line), or the
        batch is unknown or cannot be split (:func:`batch_size`).
    Inexpressible
        ``fmt`` cannot express this plan; the exception names why and the best
        plan it can express, with its ``T``.
    Unsupported
        ``torchtitan`` for a model whose module names it would not get right;
        ``megatron`` or ``torchtitan`` for a plan of several pipelines.
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
    if why := several_pipelines_problem(plan, fmt):
        raise Unsupported(why)
    size = batch_size(instance, plan, microbatch_size)
    if why := expressible_problem(instance, plan):
        raise Inexpressible(fmt, why, nearest_plan(instance), ev.iteration_time_s)
    if fmt == "megatron":
        return megatron_arguments(instance, plan, ev, size)
    if why := module_names_problem(instance, module_names):
        raise Unsupported(why)
    return torchtitan_config(instance, plan, ev, size)


__all__ = ["BATCH_FORMATS", "FORMATS", "Inexpressible", "Unsupported", "batch_size", "export",
           "nearest_plan", "several_pipelines_problem"]
