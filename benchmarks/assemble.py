"""Write docs/benchmarks.md from the tables the benchmark and experiment scripts wrote.

    python benchmarks/assemble.py

The prose lives in benchmarks/benchmarks_intro.md; every number below it comes
from a results file written by a script named in its own header.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: the stems a survey of fresh draws takes (``cdynp_speed.py --v3 --fresh``)
_STEMS = ("v3-medium-01", "v3-medium-02-small-model", "v3-medium-03-slow-sync8",
          "v3-medium-04-gpipe", "v3-large-01", "v3-large-02-long-seq", "v3-large-03-slow-sync8")


def _survey(name: str, seeds: tuple) -> tuple[str, str]:
    """A survey of ``seeds`` of every stem of :data:`_STEMS`, written to ``results/name``."""
    return (f"benchmarks/results/{name}",
            f"python benchmarks/cdynp_speed.py --v3 --time-limit 900 --fresh-out {name} "
            "--fresh " + " ".join(f"{stem}:{seed}" for stem in _STEMS for seed in seeds))


ORDER = [
    ("benchmarks/results/dp_scaling.md", "python benchmarks/dp_scaling.py"),
    ("benchmarks/results/dp_scaling_scale.md", "python benchmarks/dp_scaling.py --scale"),
    ("benchmarks/results/dp_kernel.md", "python benchmarks/dp_scaling.py --kernel"),
    ("benchmarks/results/dp_scaling_v3.md", "python benchmarks/dp_scaling.py --v3"),
    ("benchmarks/results/dp_scaling_v3_fresh.md",
     "python benchmarks/dp_scaling.py --v3-fresh 9,10,11,12,13,14"),
    ("benchmarks/results/dp_scaling_v3_fresh_15_20.md",
     "python benchmarks/dp_scaling.py --v3-fresh 15,16,17,18,19,20 --out "
     "benchmarks/results/dp_scaling_v3_fresh_15_20.md"),
    ("benchmarks/results/dp_scaling_v3_fresh_21_26.md",
     "python benchmarks/dp_scaling.py --v3-fresh 21,22,23,24,25,26 --out "
     "benchmarks/results/dp_scaling_v3_fresh_21_26.md"),
    ("benchmarks/results/dp_threads_v3.md", "python benchmarks/dp_scaling.py --v3-threads"),
    ("benchmarks/results/formulations.md", "python benchmarks/formulations.py"),
    ("benchmarks/results/formulations_v3.md",
     "python benchmarks/formulations.py --sets v3/small"),
    ("benchmarks/results/formulations_v3_medium.md",
     "python benchmarks/formulations.py --sets v3/medium"),
    ("benchmarks/results/formulations_flow.md",
     "python benchmarks/formulations.py --time-limit 60 --sets hybrid/medium --solvers "
     "ilp-path --backends highs --device-states --no-figure --out "
     "benchmarks/results/formulations_flow.md"),
    ("benchmarks/results/formulations_flow_v3.md",
     "python benchmarks/formulations.py --time-limit 120 --sets v3/small v3/medium --solvers "
     "ilp-path --backends highs --device-states --no-figure --out "
     "benchmarks/results/formulations_flow_v3.md"),
    ("benchmarks/results/formulations_flow_fresh.md",
     "python benchmarks/formulations.py --time-limit 120 --fresh "
     "v3-medium-02-small-model:3-8 --solvers ilp-path --backends highs --device-states "
     "--no-figure --no-lp --cpu-limit --wall-factor 10 --ref-limit 300 --out "
     "benchmarks/results/formulations_flow_fresh.md"),
    ("benchmarks/results/formulations_flow_fresh_s28.md",
     "python benchmarks/formulations.py --time-limit 120 --fresh "
     "v3-medium-02-small-model:3-8 --solvers ilp-path --backends highs --device-states "
     "--no-figure --no-lp --cpu-limit --wall-factor 10 --ref-limit 300 --out "
     "benchmarks/results/formulations_flow_fresh_s28.md"),
    ("benchmarks/results/formulations_flow_fresh_01.md",
     "python benchmarks/formulations.py --time-limit 120 --fresh v3-medium-01:3-8 "
     "--solvers ilp-path --backends highs --device-states --no-figure --no-lp --cpu-limit "
     "--wall-factor 10 --ref-limit 300 --out benchmarks/results/formulations_flow_fresh_01.md"),
    ("benchmarks/results/formulations_flow_fresh_reruns.md",
     "python benchmarks/formulations.py --time-limit 120 --fresh v3-medium-01:4,7 "
     "v3-medium-02-small-model:6 --solvers ilp-path --backends highs --device-states "
     "--no-figure --no-lp --cpu-limit --wall-factor 30 --ref-limit 300 --out "
     "benchmarks/results/formulations_flow_fresh_reruns.md"),
    ("benchmarks/results/formulations_flow_v3_medium_cpu.md",
     "python benchmarks/formulations.py --time-limit 120 --sets v3/medium --solvers ilp-path "
     "--backends highs --device-states --no-figure --no-lp --cpu-limit --wall-factor 10 "
     "--ref-limit 300 --out benchmarks/results/formulations_flow_v3_medium_cpu.md"),
    ("benchmarks/results/formulations_flow_v3_cpu.md",
     "python benchmarks/formulations.py --time-limit 120 --sets v3/small v3/medium --solvers "
     "ilp-path --backends highs --device-states --cpu-limit --out "
     "benchmarks/results/formulations_flow_v3_cpu.md"),
    ("benchmarks/results/formulations_flow_fresh_others.md",
     "python benchmarks/formulations.py --time-limit 120 --fresh v3-medium-01:3 "
     "v3-medium-04-gpipe:3 v3-medium-03-slow-sync8:3 --solvers ilp-path --backends highs "
     "--device-states --no-figure --out benchmarks/results/formulations_flow_fresh_others.md "
     "--no-lp --cpu-limit --ref-limit 300"),
    ("benchmarks/results/formulations_flow_fresh_s31.md",
     "three runs of python benchmarks/formulations.py --time-limit 120 --fresh "
     "v3-medium-02-small-model:SEEDS (3,4,7; 9-14; 5,6,8) --solvers ilp-path --backends "
     "highs --device-states --no-figure --no-lp --cpu-limit --wall-factor 10 --ref-limit 300"),
    ("benchmarks/results/formulations_flow_fresh_s32.md",
     "runs of python benchmarks/formulations.py --time-limit 120 --fresh "
     "v3-medium-02-small-model:4,15-18 (and -01, -03 at 15) --solvers ilp-path --backends "
     "highs --device-states --no-figure --no-lp --cpu-limit --wall-factor 10 --ref-limit 300, "
     "on the branch and on main"),
    ("benchmarks/results/formulations_flow_fresh_s33.md",
     "runs of python benchmarks/formulations.py --time-limit 120 --fresh "
     "v3-medium-02-small-model:4,15-18,27,28 (and -01, -03, -04 at 27) --solvers ilp-path "
     "--backends highs --device-states --no-figure --no-lp --cpu-limit --wall-factor 10 "
     "--ref-limit 300, on the branch and on main"),
    ("benchmarks/results/formulations_flow_fresh_s34.md",
     "runs of python benchmarks/formulations.py --time-limit 120 --fresh "
     "v3-medium-02-small-model:4,16,18,29-34 (and others: see the file) --solvers ilp-path "
     "--backends highs --device-states --no-figure --no-lp --cpu-limit --wall-factor 10 "
     "--ref-limit 300, on the branch and on main"),
    ("benchmarks/results/formulations_flow_fresh_s35.md",
     "runs of python benchmarks/formulations.py --time-limit 120 --fresh "
     "v3-medium-02-small-model:4,33,41,42 v3-medium-03-slow-sync8:31,32 (and --sets v3/medium; "
     "and seeds 41-44 of every v3/medium entry on main) --solvers ilp-path --backends highs "
     "--device-states --no-figure --no-lp --cpu-limit --wall-factor 10 --ref-limit 300, on "
     "the branch and on main"),
    ("benchmarks/results/formulations_flow_fresh_hybrid.md",
     "python benchmarks/formulations.py --time-limit 60 --fresh hybrid-medium-01:5,6 "
     "hybrid-medium-02-man100:5,6 hybrid-medium-03-man400:5,6 hybrid-medium-04-degraded:5,6 "
     "hybrid-medium-05-mem:5,6 --solvers ilp-path --backends highs --device-states "
     "--no-figure --out benchmarks/results/formulations_flow_fresh_hybrid.md --no-lp "
     "--ref-limit 120"),
    ("benchmarks/results/cpsat_v3_medium.md",
     "python benchmarks/formulations.py --time-limit 120 --sets v3/small v3/medium "
     "--solvers cpsat --backends highs --no-figure --out "
     "benchmarks/results/cpsat_v3_medium.md --cpu-limit --ref-limit 300"),
    ("benchmarks/results/cpsat_v3_medium_head.md",
     "python benchmarks/formulations.py --time-limit 120 --sets v3/medium --solvers cpsat "
     "--backends highs --no-figure --out benchmarks/results/cpsat_v3_medium_head.md "
     "--cpu-limit --ref-limit 300"),
    ("benchmarks/results/cpsat_v3.md",
     "python benchmarks/cpsat.py --time-limit 60 --sets hybrid/medium v3/small v3/medium "
     "--out benchmarks/results/cpsat_v3.md"),
    ("benchmarks/results/cpsat.md", "python benchmarks/cpsat.py --time-limit 60"),
    ("benchmarks/results/limits.md", "python benchmarks/limits.py"),
    ("benchmarks/results/cdynp_speed.md", "python benchmarks/cdynp_speed.py"),
    ("benchmarks/results/cdynp_tradeoff.md", "python benchmarks/cdynp_tradeoff.py"),
    ("benchmarks/results/cdynp_hosts.md", "python benchmarks/cdynp_hosts.py"),
    ("benchmarks/results/cdynp_v3.md", "python benchmarks/cdynp_v3.py"),
    ("benchmarks/results/cdynp_speed_v3.md",
     "python benchmarks/cdynp_speed.py --v3 --sets v3/small v3/medium v3/large "
     "--time-limit 3000"),
    ("benchmarks/results/cdynp_speed_v3_fresh.md",
     "python benchmarks/cdynp_speed.py --v3 --time-limit 300 --fresh " + " ".join(
         f"{stem}:{seed}" for stem in ("v3-medium-01", "v3-medium-03-slow-sync8",
                                       "v3-medium-04-gpipe") for seed in (23, 24))
     + " " + " ".join(f"{stem}:{seed}" for stem in ("v3-large-01", "v3-large-02-long-seq",
                                                   "v3-large-03-slow-sync8")
                      for seed in (21, 24, 28))),
    _survey("cdynp_speed_v3_fresh_31_33.md", (31, 32, 33)),
    _survey("cdynp_speed_v3_fresh_34_36.md", (34, 35, 36)),
    _survey("cdynp_speed_v3_fresh_37_39.md", (37, 38, 39)),
    _survey("cdynp_speed_v3_fresh_40_42.md", (40, 41, 42)),
    _survey("cdynp_speed_v3_fresh_43_45.md", (43, 44, 45)),
    _survey("cdynp_speed_v3_fresh_46_48.md", (46, 47, 48)),
    _survey("cdynp_speed_v3_fresh_49_51.md", (49, 50, 51)),
    _survey("cdynp_speed_v3_fresh_52_54.md", (52, 53, 54)),
    _survey("cdynp_speed_v3_fresh_55_57.md", (55, 56, 57)),
    ("benchmarks/results/cdynp_tradeoff_v3.md",
     "python benchmarks/cdynp_tradeoff.py --v3 --sets v3/small v3/medium --time-limit 120, "
     "then --v3 --sets v3/large --time-limit 600 --merge"),
    ("benchmarks/results/cdynp_hosts_v3.md", "python benchmarks/cdynp_hosts.py --v3"),
    ("benchmarks/results/schedule_vs_formula.md", "python benchmarks/schedule_vs_formula.py"),
    ("experiments/results/one_to_four_dcs.md", "python experiments/one_to_four_dcs.py"),
    ("experiments/results/larger_tasks.md", "python experiments/larger_tasks.py"),
    ("experiments/results/degraded_network.md", "python experiments/degraded_network.py"),
    ("experiments/results/degraded_network_online.md",
     "python experiments/degraded_network.py --online"),
    ("experiments/results/search_vs_size.md", "python experiments/search_vs_size.py"),
    ("experiments/results/hybrid.md", "python experiments/hybrid.py"),
    ("experiments/results/classic_cost.md", "python experiments/classic_cost.py"),
    ("experiments/results/pipeline_or_replicate.md",
     "python experiments/pipeline_or_replicate.py"),
    ("experiments/results/zero_bubble.md", "python experiments/zero_bubble.py"),
    ("experiments/results/zero_bubble_interleaved.md",
     "python experiments/zero_bubble.py --interleaved"),
    ("experiments/results/grouping.md", "python experiments/grouping.py"),
    ("benchmarks/results/online.md", "python benchmarks/online.py"),
    ("experiments/results/online.md", "python experiments/online.py"),
]


def _demote(text: str) -> str:
    """Shift Markdown headings so the file's top heading is a level-2 section."""
    lines = text.splitlines()
    levels = [len(ln) - len(ln.lstrip("#")) for ln in lines if ln.startswith("#")]
    shift = 2 - min(levels) if levels else 0
    if shift <= 0:
        return text
    return "\n".join("#" * shift + ln if ln.startswith("#") else ln for ln in lines)


def main() -> None:
    parts = [(ROOT / "benchmarks" / "benchmarks_intro.md").read_text().rstrip(), ""]
    for rel, cmd in ORDER:
        path = ROOT / rel
        if not path.exists():
            parts += [f"## `{rel}`", "", f"Not measured yet: run `{cmd}`.", ""]
            continue
        text = _demote(path.read_text().strip())
        parts += [text, ""]
        figure = path.with_suffix(".png")
        if figure.exists():
            parts += [f"![{figure.stem}](../{Path(rel).with_suffix('.png').as_posix()})", ""]
        parts += [f"*Source: `{rel}`, written by `{cmd}`.*", ""]
    out = ROOT / "docs" / "benchmarks.md"
    out.write_text("\n".join(parts).rstrip() + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
