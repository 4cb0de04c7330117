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

    A value outside its range in :data:`RANGES` is reported; so is a device
    group whose memory (itself in range) cannot hold even the smallest layer
    with the microbatches it must keep. At most one warning per field.

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
    least = cost.in_flight(training.schedule, instance.microbatches, 1)  # the last stage's
    need = min(cost.memory_need(ly.params, ly.activation_bytes, least, training.bytes_per_param)
               for ly in instance.layers)
    for k, dc in enumerate(instance.datacenters):
        for g, group in enumerate(dc.devices):
            p = f"datacenters[{k}].devices[{g}]"
            out += _out_of_range(f"{p}.flop_per_s", "flop_per_s", group.flop_per_s)
            memory = _out_of_range(f"{p}.memory_bytes", "memory_bytes", group.memory_bytes)
            if not memory and group.memory_bytes < need:
                memory = [f"{p}.memory_bytes: {group.memory_bytes:.6g} bytes cannot hold even "
                          f"the smallest layer ({need:.6g} bytes); is the unit bytes?"]
            out += memory
        out += _link(f"datacenters[{k}].link", dc.link)
    for j, link in enumerate(instance.links):
        out += _link(f"links[{j}]", link)
    return out


def _link(path: str, link) -> list[str]:
    return (_out_of_range(f"{path}.bandwidth_bytes_per_s", "bandwidth_bytes_per_s",
                          link.bandwidth_bytes_per_s)
            + _out_of_range(f"{path}.latency_s", "latency_s", link.latency_s))
