"""Network figures: the link inside a datacenter and the metro (MAN) optical links.

Sources are in ``docs/instances.md``.
"""

from __future__ import annotations

import random

from ..instance import Link

GBIT = 1e9 / 8  # bytes per second in one Gbit/s

#: per-GPU scale-out link inside a DC: InfiniBand HDR (200) or NDR (400) Gbit/s
INTRA_DC_GBIT = (200, 400)
#: the same with a 100 Gbit/s generation too (EDR InfiniBand, 100 GbE RoCE): the hybrid presets
NIC_GBIT = (100, 200, 400)
#: end-to-end latency of one message inside a DC (NIC + switch hops), seconds
INTRA_DC_LATENCY_S = (2e-6, 5e-6)
#: DWDM wavelength rates of metro optical links, Gbit/s
MAN_GBIT = (10, 40, 100, 200, 400)
#: fibre distance between neighbouring DCs of a metro area, km
MAN_DISTANCE_KM = (10.0, 100.0)
#: one-way propagation delay in fibre (light at about 2/3 c)
FIBRE_S_PER_KM = 5e-6


def intra_dc_link(rng: random.Random, gbit_choices=INTRA_DC_GBIT) -> Link:
    """A drawn link inside a DC: one NIC per GPU at one of ``gbit_choices``, a few microseconds."""
    gbit = rng.choice(gbit_choices)
    latency = round(rng.uniform(*INTRA_DC_LATENCY_S), 8)
    return Link(bandwidth_bytes_per_s=gbit * GBIT, latency_s=latency)


def man_link(gbit: float, distance_km: float) -> Link:
    """A metro optical link of ``gbit`` Gbit/s over ``distance_km`` of fibre."""
    return Link(bandwidth_bytes_per_s=gbit * GBIT, latency_s=distance_km * FIBRE_S_PER_KM)


def random_man_link(rng: random.Random, gbit_choices=MAN_GBIT) -> Link:
    """A drawn metro link: one of ``gbit_choices`` over 10-100 km of fibre."""
    distance = round(rng.uniform(*MAN_DISTANCE_KM), 1)
    return man_link(rng.choice(gbit_choices), distance)


def degraded(link: Link, factor: float) -> Link:
    """``factor`` in (0, 1]: bandwidth times ``factor``, latency divided by it."""
    check_degrade(factor)
    return Link(bandwidth_bytes_per_s=link.bandwidth_bytes_per_s * factor,
                latency_s=link.latency_s / factor)


def check_degrade(factor: float) -> None:
    """Raise :class:`ValueError` unless ``factor`` is a number in ``(0, 1]``."""
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not 0 < factor <= 1:
        raise ValueError(f"degrade must be a number in (0, 1], got {factor!r}")
