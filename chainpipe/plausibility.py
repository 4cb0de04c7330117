"""Plausibility warnings: valid values that are almost certainly a mistake.

An instance can satisfy every rule of the format and still be wrong in a way
a user would want to hear about, typically a unit slip (``memory_bytes: 80``
meant as GB). These checks never change what a solver does; the command line
prints them on stderr (exit status unchanged) and ``--strict`` makes them
errors. Each warning names its JSON path, like a validation error.
"""

from __future__ import annotations

from .instance import Instance


def plausibility_warnings(instance: Instance) -> list[str]:
    """Warnings ``"<json path>: <what looks wrong>"`` for ``instance`` (empty if none).

    Parameters
    ----------
    instance : Instance
        A valid instance.

    Returns
    -------
    list of str
        One line per implausible value, in document order.
    """
    out: list[str] = []
    training = instance.training
    need = min(
        training.bytes_per_param * ly.params
        + (1 if training.schedule == "1f1b" else instance.microbatches) * ly.activation_bytes
        for ly in instance.layers
    )
    for k, dc in enumerate(instance.datacenters):
        for g, group in enumerate(dc.devices):
            if group.memory_bytes < need:
                out.append(
                    f"datacenters[{k}].devices[{g}].memory_bytes: {group.memory_bytes:.6g} bytes "
                    f"cannot hold even the smallest layer ({need:.6g} bytes); is the unit bytes?"
                )
    return out
