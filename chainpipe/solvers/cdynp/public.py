"""The public part of an instance (``problem.md`` section 5).

Public to every DC: the model, ``training``, the chain order (DC names) and the
chain links between neighbouring DCs. A :class:`PublicInstance` holds exactly
that and nothing a DC keeps private (device types, counts, rates, memory,
internal links).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...instance import Instance, Layer, Link, Model, Training

PUBLIC_FORMAT = "chainpipe-public/1"
PRIVATE_FORMAT = "chainpipe-private/1"


@dataclass(frozen=True)
class PublicInstance:
    name: str
    model: Model
    training: Training
    datacenter_names: tuple[str, ...]
    links: tuple[Link, ...]  # links[k] joins DC k and DC k + 1

    @classmethod
    def of(cls, instance: Instance) -> PublicInstance:
        return cls(instance.name, instance.model, instance.training,
                   tuple(dc.name for dc in instance.datacenters), instance.links)

    @property
    def num_layers(self) -> int:
        return len(self.model.layers)

    @property
    def num_datacenters(self) -> int:
        return len(self.datacenter_names)

    @property
    def microbatches(self) -> int:
        return self.training.microbatches

    @property
    def position_cap(self) -> int:
        """Largest downstream stage count ``r`` worth telling apart.

        A stage with ``r`` stages after it sits at position ``p = r + 1``; 1F1B
        stashes ``min(M, p)`` microbatches, which saturates at ``r = M - 1``;
        gpipe stashes ``M`` whatever ``r``.
        """
        if self.training.schedule == "gpipe":
            return 0
        return max(0, min(self.microbatches - 1, self.num_layers))

    def boundary_bytes(self) -> np.ndarray:
        """``[b]``: bytes crossing the boundary before layer ``b`` (index 0 unused)."""
        return np.array([0.0] + [ly.output_bytes for ly in self.model.layers])

    def to_dict(self) -> dict:
        return {
            "format": PUBLIC_FORMAT,
            "name": self.name,
            "model": {"name": self.model.name, "layers": [
                {"name": ly.name, "fwd_flop": ly.fwd_flop, "bwd_flop": ly.bwd_flop,
                 "params": ly.params, "activation_bytes": ly.activation_bytes,
                 "output_bytes": ly.output_bytes} for ly in self.model.layers]},
            "training": {"microbatches": self.training.microbatches,
                         "schedule": self.training.schedule,
                         "bytes_per_param": self.training.bytes_per_param},
            "datacenters": list(self.datacenter_names),
            "links": [{"bandwidth_bytes_per_s": lk.bandwidth_bytes_per_s,
                       "latency_s": lk.latency_s} for lk in self.links],
        }

    @classmethod
    def from_dict(cls, d: dict) -> PublicInstance:
        if d.get("format") != PUBLIC_FORMAT:
            raise ValueError(f"format: expected {PUBLIC_FORMAT!r}, got {d.get('format')!r}")
        model = Model(d["model"]["name"], tuple(Layer(**ly) for ly in d["model"]["layers"]))
        return cls(d["name"], model, Training(**d["training"]), tuple(d["datacenters"]),
                   tuple(Link(**lk) for lk in d["links"]))
