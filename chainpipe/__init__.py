"""chainpipe: cut a training pipeline into stages and place them on the GPUs of a MAN chain of data centers.

Public API::

    import chainpipe as cp
    inst = cp.read("instances/small/small-03-mem-1f1b.json")
    res = cp.solve(inst, solver="dp")
    print(res.status, res.iteration_time, res.plan)
    print(cp.evaluate(inst, res.plan).bottleneck)
"""

from .instance import (
    Datacenter,
    DeviceGroup,
    Instance,
    InstanceError,
    Layer,
    Link,
    Model,
    Parallelism,
    Training,
)
from .io import instance_from_dict, instance_to_dict, read, read_plan, write, write_plan
from .plan import Evaluation, Pipeline, Plan, Stage, evaluate
from .result import Outcome, Result, Status
from .solve import SOLVERS, solve

__all__ = [
    "SOLVERS",
    "Datacenter",
    "DeviceGroup",
    "Evaluation",
    "Instance",
    "InstanceError",
    "Layer",
    "Link",
    "Parallelism",
    "Model",
    "Outcome",
    "Pipeline",
    "Plan",
    "Result",
    "Stage",
    "Training",
    "Status",
    "evaluate",
    "instance_from_dict",
    "instance_to_dict",
    "read",
    "read_plan",
    "solve",
    "write",
    "write_plan",
]
__version__ = "0.2.0"
