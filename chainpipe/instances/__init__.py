"""Instance generator: published model shapes, a GPU catalogue, metro networks, presets.

    from chainpipe.instances import generate, PRESETS
    inst = generate("metro", seed=3, model="llama2-13b", degrade=0.5)

The committed sets in ``instances/`` are written by ``python -m chainpipe.instances.sets``.
"""

from .generator import BYTES_PER_PARAM, PRESETS, generate
from .gpus import GPUS
from .models import MODELS

__all__ = ["BYTES_PER_PARAM", "GPUS", "MODELS", "PRESETS", "generate"]
