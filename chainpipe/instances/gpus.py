"""GPU catalogue: vendor peak dense 16-bit tensor rates, memory sizes and node links.

An instance carries a *sustained* rate, ``peak x MFU``, and the memory a
training process can use, ``memory - reserve``. For version 2 of the format a
group also carries its node size and the bandwidth per GPU inside a node: the
NVLink generation of an SXM part, the PCIe x16 slot of a PCIe card, per
direction (half the bidirectional total the datasheets print). Sources are in
``docs/instances.md``.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..instance import DeviceGroup
from ..names import unknown_name

TERA = 1e12
GIB = 2**30
GB = 1e9

#: model FLOPs utilisation applied to every peak (sustained training is 35-55% of peak)
DEFAULT_MFU = 0.45
#: memory kept by the framework (CUDA context, allocator slack, communication buffers)
DEFAULT_RESERVE_BYTES = 3 * GIB


@dataclass(frozen=True)
class GPU:
    """A catalogue entry: a device type's vendor figures and their source."""

    type: str  # the device type name used in instances
    peak_flop_per_s: float  # dense FP16/BF16 tensor-core rate, no sparsity
    memory_bytes: int  # on-board memory as reported by the driver (GiB)
    source: str
    devices_per_node: int  # GPUs per server of the reference platform (DGX, HGX, PCIe server)
    link_bytes_per_s: float  # per GPU and direction inside a node (NVLink or PCIe x16)
    link: str  # the interconnect and its source

    def effective_flop_per_s(self, mfu: float = DEFAULT_MFU) -> float:
        """The sustained rate, ``peak x mfu``."""
        return self.peak_flop_per_s * mfu

    def usable_memory_bytes(self, reserve: float = DEFAULT_RESERVE_BYTES) -> float:
        """The memory a training process can use, ``memory - reserve``."""
        return float(self.memory_bytes - reserve)

    def node_size(self, count: int, largest: int | None = None) -> int:
        """Devices per node for ``count`` devices: the largest power of two that divides
        ``count`` and is at most the platform's node (or ``largest``, if smaller)."""
        cap = self.devices_per_node if largest is None else min(largest, self.devices_per_node)
        size = 1
        while size * 2 <= cap and count % (size * 2) == 0:
            size *= 2
        return size

    def group(self, count: int, *, mfu: float = DEFAULT_MFU,
              reserve: float = DEFAULT_RESERVE_BYTES, nodes: bool = False,
              largest_node: int | None = None) -> DeviceGroup:
        """``count`` devices of this type as an instance's device group.

        With ``nodes``, the group also carries the version-2 node fields:
        :meth:`node_size` devices per node (at most ``largest_node`` when given)
        and, for nodes of two or more, the per-GPU bandwidth inside a node.
        Without it, the group is a version-1 group (one device per node).
        """
        per_node = self.node_size(count, largest_node) if nodes else 1
        return DeviceGroup(type=self.type, count=count,
                           flop_per_s=self.effective_flop_per_s(mfu),
                           memory_bytes=self.usable_memory_bytes(reserve),
                           devices_per_node=per_node,
                           node_bandwidth_bytes_per_s=(self.link_bytes_per_s if per_node > 1
                                                       else None))


GPUS: dict[str, GPU] = {
    g.type: g
    for g in (
        GPU("V100-32GB", 125 * TERA, 32 * GIB, "NVIDIA V100 datasheet (SXM2): 125 TFLOPS tensor",
            8, 150 * GB, "NVLink 2 (V100 SXM2 datasheet: 300 GB/s), DGX-1 8-GPU node"),
        GPU("A100-40GB", 312 * TERA, 40 * GIB, "NVIDIA A100 datasheet: 312 TFLOPS BF16/FP16 dense",
            8, 300 * GB, "NVLink 3 (A100 SXM datasheet: 600 GB/s), DGX/HGX A100 8-GPU node"),
        GPU("A100-80GB", 312 * TERA, 80 * GIB, "NVIDIA A100 datasheet: 312 TFLOPS BF16/FP16 dense",
            8, 300 * GB, "NVLink 3 (A100 SXM datasheet: 600 GB/s), DGX/HGX A100 8-GPU node"),
        GPU("H100-SXM", 989 * TERA, 80 * GIB, "NVIDIA H100 datasheet (SXM5): 989 TFLOPS BF16 dense",
            8, 450 * GB, "NVLink 4 (H100 SXM datasheet: 900 GB/s), DGX/HGX H100 8-GPU node"),
        GPU("L40S", 362 * TERA, 48 * GIB, "NVIDIA L40S datasheet: 362.05 TFLOPS BF16 dense",
            8, 32 * GB, "PCIe Gen4 x16 (L40S datasheet: 64 GB/s bidirectional), 8-card server"),
        GPU("RTX4090", 165 * TERA, 24 * GIB,
            "NVIDIA Ada whitepaper: 165.2 TFLOPS FP16 tensor (FP16 accumulate) dense",
            8, 32 * GB, "PCIe Gen4 x16 (32 GB/s per direction), 8-card server, no GPU bridge"),
    )
}


def gpu(name: str) -> GPU:
    """The catalogue entry ``name``; a :class:`KeyError` says "did you mean" for a near miss."""
    try:
        return GPUS[name]
    except KeyError:
        raise KeyError(unknown_name("GPU", name, GPUS)) from None
