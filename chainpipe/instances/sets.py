"""The committed instance sets: ``small``, ``medium``, ``large`` and ``hybrid/{small,medium,large}``.

    python -m chainpipe.instances.sets             # (re)write every set and its manifest.json
    python -m chainpipe.instances.sets --check     # regenerate in memory, compare byte for byte
    python -m chainpipe.instances.sets --sets hybrid/small   # one set
    python -m chainpipe.instances.sets --solve dp  # also solve each instance and print T

Each instance is ``generate(preset, seed, **overrides)`` renamed to its file
stem; a set named ``hybrid/small`` lives in ``instances/hybrid/small``.
Feasibility is certified when the sets are written: a feasible instance gets a
witness plan that :func:`chainpipe.plan.evaluate` accepts (for an instance
with hybrid parallelism the manifest records it, see
:mod:`chainpipe.instances.witness`); the one deliberately infeasible instance
gets the reason :meth:`chainpipe.tables.CostTables.infeasibility_reason` proves.
A file that already holds its instance is not rewritten (the version-1 sets
keep their ``chainpipe-instance/1`` text).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

from ..instance import Instance
from ..io import instance_to_dict, read
from ..plan import Plan, evaluate
from ..tables import CostTables
from .generator import generate
from .witness import hybrid_witness, plan_tuples

MANIFEST_FORMAT = "chainpipe-instance-set/1"
ROOT = Path(__file__).resolve().parents[2] / "instances"
#: the command that rebuilds the sets written before the hybrid ones (it rebuilds all)
GENERATOR = "python -m chainpipe.instances.sets"
#: significant digits of a witness's T in a manifest (stable under last-bit rounding)
WITNESS_DIGITS = 6


@dataclass(frozen=True)
class Entry:
    stem: str
    preset: str
    seed: int
    overrides: dict = field(default_factory=dict)
    purpose: str = ""
    feasible: bool = True

    def instance(self) -> Instance:
        """The set's instance. The committed sets predate ``training.microbatch_size``:
        their layers are costed for one sequence per microbatch and they do not state it
        (so no width rule applies and their optima stay)."""
        inst = generate(self.preset, self.seed, **{"microbatch_size": 1, **self.overrides})
        training = dataclasses.replace(inst.training, microbatch_size=None)
        return dataclasses.replace(inst, name=self.stem, training=training)


SETS: dict[str, tuple[Entry, ...]] = {
    "small": (
        Entry("small-01-tiny", "tiny", 0, {},
              "GPT-3 125M over 3 DCs and 6 GPUs of 3 types; memory never binds"),
        Entry("small-02-gpipe", "tiny", 1, {"schedule": "gpipe", "microbatches": 8},
              "GPipe: every stage stashes all M microbatches"),
        Entry("small-03-mem-1f1b", "tiny", 10, {"model": "llama2-70b", "blocks": 14,
                                                 "microbatches": 16},
              "Llama-2 70B slice (14 blocks) on 32-80 GB cards: 1F1B position decides what fits"),
        Entry("small-04-mem-gpipe", "tiny", 4, {"model": "llama2-13b", "blocks": 14,
                                                 "schedule": "gpipe", "microbatches": 16},
              "Llama-2 13B slice with GPipe: every stage stashes 16 microbatches, memory binds"),
        Entry("small-05-slow-man", "tiny", 5, {"model": "gpt3-1.3b", "degrade": 0.05},
              "GPT-3 1.3B slice, metro links degraded 20x: links pace the pipeline"),
        Entry("small-06-one-dc", "tiny", 6, {"model": "gpt3-2.7b", "datacenters": 1,
                                              "gpus_per_dc": 6, "blocks": 8},
              "a single DC of 6 GPUs (no metro link)"),
        Entry("small-07-eight-gpus", "tiny", 7, {"model": "gpt3-6.7b", "gpus_per_dc": 4,
                                                  "datacenters": 2, "blocks": 12,
                                                  "microbatches": 16},
              "GPT-3 6.7B slice over 2 DCs x 4 GPUs"),
        Entry("small-08-three-dc", "tiny", 8, {"model": "llama2-7b", "datacenters": 3,
                                                "gpus_per_dc": 2, "blocks": 6},
              "Llama-2 7B slice over 3 DCs x 2 GPUs"),
        Entry("small-infeasible", "tiny", 13, {"model": "llama2-70b", "blocks": 4,
                                               "schedule": "gpipe", "microbatches": 32},
              "deliberately infeasible: a Llama-2 70B block with 32 microbatches stashed "
              "fits no device", feasible=False),
    ),
    "medium": (
        Entry("medium-01-metro", "metro", 0, {}, "the metro preset as drawn"),
        Entry("medium-02-llama70b", "metro", 0, {"model": "llama2-70b", "datacenters": 4,
                                                  "gpus_per_dc": 16, "microbatches": 16},
              "Llama-2 70B on 64 mixed cards: memory binds (with M = 32 no plan fits)"),
        Entry("medium-03-gpipe", "metro", 3, {"model": "gpt3-13b", "schedule": "gpipe",
                                              "microbatches": 16},
              "GPT-3 13B with GPipe"),
        Entry("medium-04-degraded", "metro", 4, {"model": "llama2-13b", "degrade": 0.1},
              "Llama-2 13B, metro links degraded 10x"),
        Entry("medium-05-pool-2dc", "pool", 0, {"datacenters": 2},
              "the 32-GPU pool split over 2 DCs"),
        Entry("medium-06-pool-4dc", "pool", 0, {"datacenters": 4},
              "the same pool split over 4 DCs"),
    ),
    "large": (
        Entry("large-01", "metro-large", 0, {}, "metro-large as drawn"),
        Entry("large-02", "metro-large", 1, {}, "metro-large as drawn"),
        Entry("large-03", "metro-large", 2, {"degrade": 0.25},
              "metro-large, metro links degraded 4x"),
    ),
    "hybrid/small": (
        Entry("hybrid-small-01", "hybrid-small", 2, {},
              "Llama-2 13B slice (6 layers) over 2 DCs x 4 GPUs in nodes of 2, a 10 Gbit/s "
              "metro link, ZeRO-1, 1F1B"),
        Entry("hybrid-small-02-gpipe-nozero", "hybrid-small", 3,
              {"blocks": 6, "schedule": "gpipe", "zero": False},
              "GPT-3 6.7B slice (8 layers), 2 DCs x 4 GPUs of 3 types, GPipe, ZeRO off"),
        Entry("hybrid-small-03-one-dc", "hybrid-small", 1, {"blocks": 2},
              "one DC of 8 GPUs in two nodes of 4 (A100 and V100), 4 layers"),
        Entry("hybrid-small-04-three-dc", "hybrid-small", 11, {"schedule": "gpipe"},
              "3 DCs x 2 GPUs of 4 types (nodes of 1 and 2), GPipe, ZeRO-1"),
        Entry("hybrid-small-05-mem", "hybrid-small", 27,
              {"model": "llama2-70b", "blocks": 6, "schedule": "gpipe", "zero": False,
               "microbatches": 8},
              "Llama-2 70B slice with GPipe and ZeRO off on 32-80 GB cards: memory binds "
              "(the optimum is 5% above the one with unlimited memory)"),
    ),
    "hybrid/medium": (
        Entry("hybrid-medium-01", "hybrid", 0, {},
              "GPT-3 13B on A100-80/40 and L40S, 4 DCs x 16 GPUs, metro 200-400 Gbit/s"),
        Entry("hybrid-medium-02-man100", "hybrid", 2, {"model": "llama2-13b", "man_gbit": 100},
              "Llama-2 13B on H100, A100 and L40S, every metro link 100 Gbit/s"),
        Entry("hybrid-medium-03-man400", "hybrid", 2, {"model": "llama2-13b", "man_gbit": 400},
              "the same cluster and model with every metro link at 400 Gbit/s"),
        Entry("hybrid-medium-04-degraded", "hybrid", 3, {"degrade": 0.1},
              "GPT-3 13B on H100, A100-80 and L40S, metro links degraded 10x (10 Gbit/s)"),
        Entry("hybrid-medium-05-mem", "hybrid", 0,
              {"model": "llama2-70b", "blocks": 48, "zero": False,
               "gpu_types": ["A100-40GB", "L40S"]},
              "Llama-2 70B slice (50 layers) on 40-48 GB cards, ZeRO off: memory binds"),
    ),
    "hybrid/large": (
        Entry("hybrid-large-01", "hybrid-large", 0, {},
              "GPT-3 175B (98 layers) on 256 GPUs of 6 types, ZeRO-1"),
        Entry("hybrid-large-02-nozero", "hybrid-large", 1, {"zero": False},
              "GPT-3 175B with ZeRO off: memory binds"),
        Entry("hybrid-large-03-degraded", "hybrid-large", 2, {"degrade": 0.25},
              "GPT-3 175B, metro links degraded 4x"),
    ),
}


# --------------------------------------------------------------------------- feasibility
def witness_plan(instance: Instance, tables: CostTables | None = None) -> Plan | None:
    """A feasible plan built greedily from the last layer backwards, or ``None``.

    Each stage takes, among the unused devices of the current DC or an earlier
    one, the device that holds the most layers at its position (fewer stages
    keep 1F1B positions low); ties go to the latest DC, then the fastest
    device. A plan found is a certificate of feasibility; ``None`` proves nothing.
    """
    t = tables or CostTables(instance)
    left = t.count.copy()
    stages = []
    j, dc, p = t.L, t.K - 1, 1
    while j > 0:
        best = None
        for g in range(t.G):
            if left[g] == 0 or t.group_dc[g] > dc:
                continue
            n = 0
            while n < j and t.fits(g, j - n - 1, j, p):
                n += 1
            if n and (best is None or (n, t.group_dc[g], t.rate[g]) > best[0]):
                best = ((n, t.group_dc[g], t.rate[g]), g)
        if best is None:
            return None
        (n, _, _), g = best
        left[g] -= 1
        dc = int(t.group_dc[g])
        stages.append((j - n, j, dc, t.groups[g].index))
        j, p = j - n, p + 1
    plan = Plan.from_tuples(instance, stages[::-1])
    return plan if evaluate(instance, plan).feasible else None


def certify(entry: Entry, instance: Instance) -> str:
    """Check the entry's feasibility claim; returns a one-line certificate."""
    if not instance.parallelism.single_device:
        plan = hybrid_witness(instance)
        if plan is None or not entry.feasible:
            raise RuntimeError(f"{entry.stem}: an instance with parallelism must be feasible "
                               f"and have a witness plan")
        ev = evaluate(instance, plan)
        return (f"feasible: witness plan of {plan.num_stages} stages on "
                f"{sum(st.width for st in plan.stages)} devices, T = {ev.iteration_time_s:.4g} s")
    t = CostTables(instance)
    if entry.feasible:
        plan, how = witness_plan(instance, t), "greedy witness"
        if plan is None:
            from ..solvers import dp  # the exact DP: finds a plan whenever one exists

            plan, how = dp.run(instance, deadline=600).plan, "dp"
        if plan is None or not evaluate(instance, plan).feasible:
            raise RuntimeError(f"{entry.stem}: no feasible plan found for an instance meant feasible")
        return (f"feasible: {how} plan of {plan.num_stages} stages, "
                f"T = {evaluate(instance, plan).iteration_time_s:.4g} s")
    reason = t.infeasibility_reason()
    if reason is None:
        raise RuntimeError(f"{entry.stem}: meant infeasible but no proof of infeasibility")
    return f"infeasible: {reason}"


# --------------------------------------------------------------------------- files
def instance_text(instance: Instance) -> str:
    """The exact text :func:`chainpipe.io.write` produces."""
    return json.dumps(instance_to_dict(instance), indent=1, allow_nan=False) + "\n"


def witness_record(instance: Instance) -> dict:
    """A manifest's certificate of an instance with parallelism: its witness plan and T.

    ``stages`` lists ``[start, end, dc, group, d, t]``, as
    :meth:`chainpipe.plan.Plan.from_tuples` reads them; ``iteration_time_s`` is
    rounded to :data:`WITNESS_DIGITS` significant digits.
    """
    plan = hybrid_witness(instance)
    if plan is None:
        raise RuntimeError(f"{instance.name}: no witness plan for an instance meant feasible")
    ev = evaluate(instance, plan)
    return {"stages": plan_tuples(instance, plan),
            "devices": sum(st.width for st in plan.stages),
            "iteration_time_s": float(f"{ev.iteration_time_s:.{WITNESS_DIGITS}g}")}


def generator_command(set_name: str) -> str:
    """The command that rebuilds a set."""
    return GENERATOR if "/" not in set_name else f"{GENERATOR} --sets {set_name}"


def _summary(e: Entry, inst: Instance) -> dict:
    item = {
        "file": f"{e.stem}.json",
        "name": inst.name,
        "preset": e.preset,
        "seed": e.seed,
        "overrides": e.overrides,
        "purpose": e.purpose,
        "feasible": e.feasible,
        "model": inst.model.name,
        "layers": inst.num_layers,
        "datacenters": inst.num_datacenters,
        "devices": inst.num_devices,
        "device_types": sorted({g.type for dc in inst.datacenters for g in dc.devices}),
        "microbatches": inst.microbatches,
        "schedule": inst.training.schedule,
    }
    if not inst.parallelism.single_device:
        par = inst.parallelism
        item["parallelism"] = {"data_parallel": list(par.data_parallel),
                               "tensor_parallel": list(par.tensor_parallel), "zero": par.zero}
        item["witness"] = witness_record(inst)
    return item


def manifest(set_name: str, entries: tuple[Entry, ...], instances: list[Instance]) -> dict:
    return {
        "format": MANIFEST_FORMAT,
        "set": set_name,
        "generator": generator_command(set_name),
        "instances": [_summary(e, inst) for e, inst in zip(entries, instances)],
    }


def manifest_text(data: dict) -> str:
    return json.dumps(data, indent=1) + "\n"


def build(set_name: str) -> dict[str, str]:
    """File name -> exact text of every file of a set (instances and manifest)."""
    entries = SETS[set_name]
    instances = [e.instance() for e in entries]
    files = {f"{e.stem}.json": instance_text(inst) for e, inst in zip(entries, instances)}
    files["manifest.json"] = manifest_text(manifest(set_name, entries, instances))
    return files


def entry_from_manifest(item: dict) -> Entry:
    return Entry(Path(item["file"]).stem, item["preset"], item["seed"], dict(item["overrides"]),
                 item.get("purpose", ""), item.get("feasible", True))


def check_against_manifest(directory: Path) -> list[str]:
    """Regenerate every file a manifest lists; one line per file that differs.

    A file differs when it does not hold the regenerated instance, value for value.
    Files written before version 2 of the format (``chainpipe-instance/1``) keep
    their text: a version-1 file and its version-2 rewrite hold the same instance.
    """
    data = json.loads((directory / "manifest.json").read_text(encoding="utf-8"))
    problems = []
    for item in data["instances"]:
        instance = entry_from_manifest(item).instance()
        path = directory / item["file"]
        if not path.exists():
            problems.append(f"{path}: missing")
        elif read(path) != instance:
            problems.append(f"{path}: differs from generate({item['preset']!r}, {item['seed']}, "
                            f"**{item['overrides']})")
        elif "witness" in item:
            plan = Plan.from_tuples(instance, item["witness"]["stages"])
            if not evaluate(instance, plan).feasible:
                problems.append(f"{directory / 'manifest.json'}: the witness of {item['file']} "
                                f"is not a feasible plan")
    return problems


def write_set(directory: Path, set_name: str, files: dict[str, str]) -> int:
    """Write a set's files; one that already holds its text, or its instance, is left as it is.

    Returns the number of files written.
    """
    directory.mkdir(parents=True, exist_ok=True)
    instances = {f"{e.stem}.json": e for e in SETS[set_name]}
    written = 0
    for n, text in files.items():
        path = directory / n
        if path.exists() and (path.read_text(encoding="utf-8") == text or (
                n in instances and read(path) == instances[n].instance())):
            continue
        path.write_text(text, encoding="utf-8")
        written += 1
    return written


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m chainpipe.instances.sets", description=__doc__.split("\n")[0])
    ap.add_argument("--root", type=Path, default=ROOT, help="where the set folders go")
    ap.add_argument("--sets", default=",".join(SETS), help="comma-separated set names")
    ap.add_argument("--check", action="store_true",
                    help="verify the committed files instead of writing them")
    ap.add_argument("--solve", metavar="SOLVER", help="also solve every instance and print T")
    ap.add_argument("--time-limit", type=float, default=60.0)
    args = ap.parse_args(argv)
    names = args.sets.split(",")
    if unknown := [n for n in names if n not in SETS]:
        ap.error(f"--sets: unknown set {unknown[0]!r}; known: {', '.join(SETS)}")
    failed = False
    for set_name in names:
        directory = args.root / set_name
        files = build(set_name)
        for e in SETS[set_name]:
            print(f"{set_name}/{e.stem}: {certify(e, e.instance())}")
        if args.check:
            listed = directory / "manifest.json"
            problems = [f"{listed}: differs from the generator"
                        for _ in [0] if not listed.exists()
                        or listed.read_text(encoding="utf-8") != files["manifest.json"]]
            if problems:
                for p in problems:
                    print(p, file=sys.stderr)
                failed = True
                continue
            problems += check_against_manifest(directory)
            for p in problems:
                print(p, file=sys.stderr)
            failed |= bool(problems)
        else:
            print(f"wrote {write_set(directory, set_name, files)} files to {directory}")
        if args.solve:
            from ..solve import solve

            for e in SETS[set_name]:
                res = solve(e.instance(), solver=args.solve, time_limit=args.time_limit)
                print(f"  {e.stem}: {res.status} T={res.iteration_time} "
                      f"({res.solve_time:.2f} s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
