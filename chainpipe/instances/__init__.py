"""Instance generator: published model shapes, a GPU catalogue, metro networks, presets.

    from chainpipe.instances import generate, PRESETS
    inst = generate("metro", seed=3, model="llama2-13b", degrade=0.5)

A real model and cluster (``docs/launch.md``):

    from chainpipe.instances import read_model_config
    from chainpipe.instances.cluster_file import cluster_instance, read_cluster
    shape = read_model_config("path/to/config.json", seq_len=4096)
    inst = cluster_instance(read_cluster("cluster.toml"), shape)   # or generate("hybrid", model=shape)

(``cluster_file`` is not imported here: ``pint`` takes a while to import, and the
command line builds its help from this package.) The committed sets in ``instances/`` are written by ``python -m chainpipe.instances.sets``.
"""

from .generator import BYTES_PER_PARAM, PRESETS, generate
from .gpus import GPUS
from .hf_config import read_model_config
from .models import MODELS

__all__ = ["BYTES_PER_PARAM", "GPUS", "MODELS", "PRESETS", "generate", "read_model_config"]
