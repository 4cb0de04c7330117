"""The built-in scenarios of the online simulation (sources in ``docs/online.md``)."""

from __future__ import annotations

import copy
from typing import Any

from ..names import unknown_name
from .scenario import FORMAT, Scenario, scenario_from_dict


def _ring() -> dict:
    """Six DCs on a metro ring (``docs/online.md``): spans of 12-35 km, 16 wavelengths."""
    gpus = [("A100-80GB", 32), ("H100-SXM", 16), ("A100-40GB", 32),
            ("L40S", 32), ("V100-32GB", 32), ("H100-SXM", 24)]
    km = [12.0, 18.5, 25.0, 35.0, 21.0, 15.5]
    names = [f"dc{i + 1}" for i in range(6)]
    return {
        "format": FORMAT, "name": "metro-ring",
        "description": "six DCs on a metro ring of 127 km, 16 x 100G wavelengths per span",
        "network": {
            "wavelength_gbit": 100,
            "datacenters": [{"name": n, "gpus": [{"type": t, "count": k}], "nic_gbit": 200}
                            for n, (t, k) in zip(names, gpus)],
            "links": [{"between": [names[i], names[(i + 1) % 6]], "km": km[i], "wavelengths": 16}
                      for i in range(6)],
        },
        "jobs": {"count": 200, "arrivals_per_hour": 3.0},
    }


#: the 9-DC meshed metro network: (a, b, km) per fibre span (``docs/online.md``)
MESH_SPANS = (
    ("dc1", "dc2", 14.0), ("dc1", "dc4", 22.0), ("dc2", "dc3", 17.0), ("dc2", "dc5", 11.0),
    ("dc3", "dc6", 26.0), ("dc4", "dc5", 9.5), ("dc4", "dc7", 31.0), ("dc5", "dc6", 13.0),
    ("dc5", "dc8", 16.0), ("dc6", "dc9", 20.0), ("dc7", "dc8", 12.0), ("dc8", "dc9", 24.0),
    ("dc1", "dc5", 19.0), ("dc5", "dc9", 28.0),
)


def _mesh() -> dict:
    gpus = {
        "dc1": [("H100-SXM", 16), ("A100-80GB", 16)], "dc2": [("A100-80GB", 32)],
        "dc3": [("L40S", 32)], "dc4": [("A100-40GB", 32)],
        "dc5": [("H100-SXM", 32), ("A100-80GB", 16)], "dc6": [("V100-32GB", 32)],
        "dc7": [("RTX4090", 32)], "dc8": [("A100-80GB", 16), ("L40S", 16)],
        "dc9": [("H100-SXM", 16)],
    }
    return {
        "format": FORMAT, "name": "metro-mesh",
        "description": "nine DCs on a meshed metro network (14 spans, 9.5-31 km), "
                       "8 x 100G wavelengths per span",
        "network": {
            "wavelength_gbit": 100,
            "datacenters": [{"name": n, "gpus": [{"type": t, "count": k} for t, k in g],
                             "nic_gbit": 200} for n, g in gpus.items()],
            "links": [{"between": [a, b], "km": km, "wavelengths": 8} for a, b, km in MESH_SPANS],
        },
        "jobs": {"count": 300, "arrivals_per_hour": 6.0, "gpus": [8, 16, 32]},
    }


def _tiny() -> dict:
    return {
        "format": FORMAT, "name": "tiny",
        "description": "two DCs of 8 A100s, one 20 km span: a few jobs, for tests and a look",
        "network": {
            "wavelength_gbit": 100,
            "datacenters": [{"name": "a", "gpus": [{"type": "A100-80GB", "count": 8}]},
                            {"name": "b", "gpus": [{"type": "A100-80GB", "count": 8}]}],
            "links": [{"between": ["a", "b"], "km": 20, "wavelengths": 4}],
        },
        "background": {"load": 0.25, "change_s": 1800},
        "jobs": {"count": 20, "arrivals_per_hour": 3.0, "models": ["gpt3-1.3b"],
                 "microbatches": [16], "iterations": [4000, 12000], "gpus": [4, 8, 12],
                 "patience_s": 600, "max_wavelengths": 2},
        "planning": {"k_paths": 2, "max_chain": 2},
    }


PRESETS: dict[str, tuple[str, Any]] = {
    "tiny": ("two DCs of 8 A100s on one span, 20 GPT-3 1.3B jobs: for tests", _tiny),
    "metro-ring": ("six DCs on a 127 km metro ring, 200 jobs at 3 per hour", _ring),
    "metro-mesh": ("nine DCs on a meshed metro network (14 spans), 300 jobs at 6 per hour",
                   _mesh),
}


def preset_dict(name: str) -> dict:
    """The JSON object of the built-in scenario ``name`` (a fresh copy)."""
    try:
        _, build = PRESETS[name]
    except KeyError:
        raise ValueError(unknown_name("scenario preset", name, PRESETS)) from None
    return copy.deepcopy(build())


def preset(name: str) -> Scenario:
    """The built-in scenario ``name``, validated like a file."""
    return scenario_from_dict(preset_dict(name))
