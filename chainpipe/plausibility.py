"""Plausibility warnings: valid values that are almost certainly a mistake.

An instance can satisfy every rule of the format and still be wrong in a way
a user would want to hear about, typically a unit slip (``memory_bytes: 80``
meant as GB). These checks never change what a solver does; the command line
prints them on stderr (exit status unchanged) and ``--strict`` makes them
errors. Each warning names its JSON path, like a validation error.

The ranges (:data:`RANGES`) are wide on purpose: each spans real hardware
from a single CPU core or a 10 Mbit/s line to well beyond today's largest
accelerators and fabrics, so a value outside is off by orders of magnitude,
not a matter of taste. ``docs/validation.md`` gives the reasoning.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import cost
from .instance import Instance


@dataclass(frozen=True)
class Range:
    """Plausible values of one field, and a hint at the unit it is in."""

    low: float
    high: float
    hint: str


#: field -> plausible range (bounds included)
RANGES: dict[str, Range] = {
    "flop_per_s": Range(1e9, 1e17, "FLOP per second of one device, sustained "
                                   "(312 TFLOP/s is 3.12e14)"),
    "memory_bytes": Range(1e8, 1e13, "bytes per device (80 GB is 8e10)"),
    "bandwidth_bytes_per_s": Range(1e6, 1e13, "bytes per second (100 Gbit/s is 1.25e10)"),
    "latency_s": Range(0.0, 1.0, "seconds (5 microseconds is 5e-6)"),
    "bytes_per_param": Range(0.25, 64.0, "bytes per parameter for weights, gradients and "
                                         "optimizer state together (16 for mixed-precision Adam)"),
    "gradient_bytes_per_param": Range(0.125, 8.0, "bytes per parameter the gradient "
                                                  "all-reduce sends (2 for 16-bit gradients)"),
    "devices_per_node": Range(1, 64, "devices in one node, joined by NVLink or PCIe "
                                     "(a DGX H100 holds 8)"),
    "node_bandwidth_bytes_per_s": Range(1e8, 1e13, "bytes per second per device inside a node "
                                                   "(NVLink 4 is 4.5e11, PCIe 5 x16 is 6.4e10)"),
}


def _out_of_range(path: str, field: str, value: float) -> list[str]:
    r = RANGES[field]
    if r.low <= value <= r.high:
        return []
    side = "below" if value < r.low else "above"
    return [f"{path}: {value:.6g} is {side} the plausible range {r.low:g} to {r.high:g}; "
            f"the unit is {r.hint}"]


def plausibility_warnings(instance: Instance) -> list[str]:
    """Warnings ``"<json path>: <what looks wrong>"`` for ``instance`` (empty if none).

    A value outside its range in :data:`RANGES` is reported; so is a
    tensor-parallel degree that no group's node can hold, and a device group
    whose memory (itself in range) cannot hold even the smallest layer with the
    microbatches it must keep, spread over the widest stage the group allows
    (or that allows no stage width at all). At most one warning per field.

    Parameters
    ----------
    instance : Instance
        A valid instance.

    Returns
    -------
    list of str
        One line per implausible value, in document order.

    Examples
    --------
    >>> from chainpipe.io import read
    >>> plausibility_warnings(read("instances/small/small-01-tiny.json"))
    []
    """
    out: list[str] = []
    training = instance.training
    out += _out_of_range("training.bytes_per_param", "bytes_per_param",
                         training.bytes_per_param)
    out += _out_of_range("training.gradient_bytes_per_param", "gradient_bytes_per_param",
                         training.gradient_bytes_per_param)
    out += _degrees_no_node_holds(instance)
    out += _widths_the_batch_rules_out(training)
    for k, dc in enumerate(instance.datacenters):
        for g, group in enumerate(dc.devices):
            p = f"datacenters[{k}].devices[{g}]"
            widths = _widest(instance, group)
            if not widths:
                out.append(f"{p}.count: {group.count} device(s) in nodes of "
                           f"{group.devices_per_node} cannot run any allowed stage "
                           f"(data_parallel {list(instance.parallelism.data_parallel)}, "
                           f"tensor_parallel {list(instance.parallelism.tensor_parallel)})")
            out += _out_of_range(f"{p}.flop_per_s", "flop_per_s", group.flop_per_s)
            memory = _out_of_range(f"{p}.memory_bytes", "memory_bytes", group.memory_bytes)
            if widths and not memory:
                memory = _holds_no_layer(instance, group, widths, f"{p}.memory_bytes")
            out += memory
            out += _out_of_range(f"{p}.devices_per_node", "devices_per_node",
                                 group.devices_per_node)
            if group.node_bandwidth_bytes_per_s is not None:
                out += _out_of_range(f"{p}.node_bandwidth_bytes_per_s",
                                     "node_bandwidth_bytes_per_s",
                                     group.node_bandwidth_bytes_per_s)
        out += _link(f"datacenters[{k}].link", dc.link)
    for j, link in enumerate(instance.links):
        out += _link(f"links[{j}]", link)
    return out


def _widths_the_batch_rules_out(training) -> list[str]:
    """A warning for the allowed data-parallel widths that do not divide microbatch_size."""
    usable = training.data_parallel_widths
    out = [d for d in training.parallelism.data_parallel if d not in usable]
    if not out:
        return []
    return [f"training.microbatch_size: {training.microbatch_size} sequences cannot be split "
            f"evenly over {', '.join(map(str, out))} replicas, so no stage can use "
            f"{'that width' if len(out) == 1 else 'those widths'} of data_parallel "
            f"{list(training.parallelism.data_parallel)} (usable: {list(usable) or 'none'})"]


def _degrees_no_node_holds(instance: Instance) -> list[str]:
    """A warning for the tensor-parallel degrees larger than every group's node."""
    largest = max(g.devices_per_node for dc in instance.datacenters for g in dc.devices)
    over = [t for t in instance.parallelism.tensor_parallel if t > largest]
    if not over:
        return []
    degrees = ", ".join(map(str, over))
    what = f"degree {degrees}" if len(over) == 1 else f"degrees {degrees}"
    many = degrees if len(over) == 1 else "that many"
    return [f"training.parallelism.tensor_parallel: {what} allowed but no device group has "
            f"{many} devices per node (the most is {largest}); no stage can use it"]


def _widest(instance: Instance, group) -> list[tuple[int, int]]:
    """The allowed ``(d, t)`` a stage on ``group`` may use that no other beats on both counts.

    Memory per device only falls as ``d`` or ``t`` grows, so these pairs hold the
    least a layer can need on the group; empty when no allowed width fits it.
    """
    par = instance.parallelism
    out = []
    for t in par.tensor_parallel:
        if t > group.devices_per_node:
            continue
        fitting = [d for d in instance.training.data_parallel_widths if d * t <= group.count]
        if fitting:
            out.append((max(fitting), t))
    return out


def _holds_no_layer(instance: Instance, group, widths, path: str) -> list[str]:
    """A warning if ``group``'s memory cannot hold the smallest layer at any of ``widths``."""
    training = instance.training
    least = cost.in_flight(training.schedule, instance.microbatches, 1)  # the last stage's
    params = np.array([float(ly.params) for ly in instance.layers])
    act = np.array([float(ly.activation_bytes) for ly in instance.layers])
    # one vector operation per width over the layers (a long chain has many groups)
    need, (d, t) = min(
        (float(np.min(cost.memory_need(params, act, least, training.bytes_per_param, d, t,
                                       training.sharded_bytes_per_param))), (d, t))
        for d, t in widths)
    if cost.memory_fits(need, group.memory_bytes):
        return []
    spread = "" if (d, t) == (1, 1) else f" per device, on the widest stage d = {d}, t = {t}"
    return [f"{path}: {group.memory_bytes:.6g} bytes cannot hold even the smallest layer "
            f"({need:.6g} bytes{spread}); is the unit bytes?"]


def _link(path: str, link) -> list[str]:
    return (_out_of_range(f"{path}.bandwidth_bytes_per_s", "bandwidth_bytes_per_s",
                          link.bandwidth_bytes_per_s)
            + _out_of_range(f"{path}.latency_s", "latency_s", link.latency_s))
