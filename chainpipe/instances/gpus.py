"""GPU catalogue: vendor peak dense 16-bit tensor rates and memory sizes.

An instance carries a *sustained* rate, ``peak x MFU``, and the memory a
training process can use, ``memory - reserve``. Sources are in
``docs/instances.md``.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..instance import DeviceGroup
from ..names import unknown_name

TERA = 1e12
GIB = 2**30

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

    def effective_flop_per_s(self, mfu: float = DEFAULT_MFU) -> float:
        """The sustained rate, ``peak x mfu``."""
        return self.peak_flop_per_s * mfu

    def usable_memory_bytes(self, reserve: float = DEFAULT_RESERVE_BYTES) -> float:
        """The memory a training process can use, ``memory - reserve``."""
        return float(self.memory_bytes - reserve)

    def group(self, count: int, *, mfu: float = DEFAULT_MFU,
              reserve: float = DEFAULT_RESERVE_BYTES) -> DeviceGroup:
        """``count`` devices of this type as an instance's device group."""
        return DeviceGroup(type=self.type, count=count,
                           flop_per_s=self.effective_flop_per_s(mfu),
                           memory_bytes=self.usable_memory_bytes(reserve))


GPUS: dict[str, GPU] = {
    g.type: g
    for g in (
        GPU("V100-32GB", 125 * TERA, 32 * GIB, "NVIDIA V100 datasheet (SXM2): 125 TFLOPS tensor"),
        GPU("A100-40GB", 312 * TERA, 40 * GIB, "NVIDIA A100 datasheet: 312 TFLOPS BF16/FP16 dense"),
        GPU("A100-80GB", 312 * TERA, 80 * GIB, "NVIDIA A100 datasheet: 312 TFLOPS BF16/FP16 dense"),
        GPU("H100-SXM", 989 * TERA, 80 * GIB, "NVIDIA H100 datasheet (SXM5): 989 TFLOPS BF16 dense"),
        GPU("L40S", 362 * TERA, 48 * GIB, "NVIDIA L40S datasheet: 362.05 TFLOPS BF16 dense"),
        GPU("RTX4090", 165 * TERA, 24 * GIB,
            "NVIDIA Ada whitepaper: 165.2 TFLOPS FP16 tensor (FP16 accumulate) dense"),
    )
}


def gpu(name: str) -> GPU:
    """The catalogue entry ``name``; a :class:`KeyError` says "did you mean" for a near miss."""
    try:
        return GPUS[name]
    except KeyError:
        raise KeyError(unknown_name("GPU", name, GPUS)) from None
