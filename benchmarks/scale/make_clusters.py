"""Write the cluster files of the "thousands of GPUs" benchmark (``benchmarks/scale/*.toml``).

    python benchmarks/scale/make_clusters.py

The files are committed; this script only says how they were made, so that a
change to their layout is one edit here rather than sixty by hand. Every
figure is a fixed pattern (no random draw):

- DC ``k`` holds ``types`` GPU types taken in turn from H100-SXM, A100-80GB,
  A100-40GB and L40S (the rotation starts at type ``k``, so neighbouring DCs
  differ), the same count of each, in nodes of 8 (the catalogue's node size
  and NVLink or PCIe bandwidth);
- the network inside a DC is NDR InfiniBand (400 Gbit/s per GPU, 5 us) when
  the DC holds H100s, HDR (200 Gbit/s, 4 us) otherwise;
- the metro links of the chain cycle through 400, 200 and 100 Gbit/s over
  fibre of 20 to 80 km (5 us per km).
"""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).resolve().parent
#: the GPU types the DCs rotate through (catalogue names)
TYPES = ("H100-SXM", "A100-80GB", "A100-40GB", "L40S")
#: metro link rates (Gbit/s) and fibre lengths (km) the chain cycles through
MAN_GBIT = (400, 200, 100)
MAN_KM = (20, 35, 50, 65, 80)
#: name -> (datacenters, types per DC, GPUs per type in each DC)
CLUSTERS = {
    "chain-8x3": (8, 3, 32),
    "chain-16x2": (16, 2, 64),
    "chain-16x3": (16, 3, 32),
}


def cluster_text(name: str, k: int, types: int, per_type: int) -> str:
    """The TOML text of ``k`` DCs of ``types`` GPU types, ``per_type`` GPUs each.

    Parameters
    ----------
    name : str
        The cluster's name (the instance's prefix).
    k, types, per_type : int
        Datacenters, GPU types per DC, GPUs of each type in a DC.

    Returns
    -------
    str
    """
    total = k * types * per_type
    lines = [f"# {k} DCs x {types} GPU types x {per_type} GPUs = {total:,} GPUs, nodes of 8.",
             "# Written by benchmarks/scale/make_clusters.py; read by benchmarks/dp_scaling.py "
             "--scale.",
             f'name = "{name}"', "", "[training]", "microbatches = 128", 'schedule = "1f1b"',
             "data_parallel = [1, 2, 4, 8, 16]", "tensor_parallel = [1, 2, 4, 8]",
             "zero = true"]
    for dc in range(k):
        kinds = [TYPES[(dc + i) % len(TYPES)] for i in range(types)]
        ndr = "H100-SXM" in kinds
        link = ('{ bandwidth = "400 Gbit/s", latency = "5 us" }' if ndr
                else '{ bandwidth = "200 Gbit/s", latency = "4 us" }')
        lines += ["", "[[datacenters]]", f'name = "dc{dc + 1:02d}"', f"link = {link}"]
        for kind in kinds:
            lines += ["", "[[datacenters.devices]]", f'gpu = "{kind}"', f"count = {per_type}",
                      "devices_per_node = 8"]
    for i in range(k - 1):
        lines += ["", "[[links]]", f'bandwidth = "{MAN_GBIT[i % len(MAN_GBIT)]} Gbit/s"',
                  f'distance = "{MAN_KM[i % len(MAN_KM)]} km"']
    return "\n".join(lines) + "\n"


def main() -> None:
    """Write every cluster of :data:`CLUSTERS` next to this script."""
    for name, (k, types, per_type) in CLUSTERS.items():
        path = HERE / f"{name}.toml"
        path.write_text(cluster_text(name, k, types, per_type))
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
