"""Shared pieces of the experiment scripts: which methods run, solving, tables, figures.

Every iteration time reported comes from :func:`chainpipe.solve` (which re-evaluates
the plan with :func:`chainpipe.plan.evaluate`) or from ``evaluate`` directly.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
sys.path.insert(0, str(HERE.parent))  # run from a checkout without installing

import chainpipe as cp
from chainpipe.solve import solver_function

#: the exact reference first, then the privacy-preserving planner, then the baselines
METHODS = ("dp", "cdynp", "comm-unaware", "single-dc", "uniform-chain", "proportional",
           "uniform", "greedy-fill")
EXACT_SOLVERS = ("dp", "cdynp", "ilp-assign", "ilp-path", "cpsat")


def parse(description: str) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--quick", action="store_true", help="a small run (under a minute)")
    ap.add_argument("--time-limit", type=float, default=None,
                    help="seconds per solve (default: the script's own)")
    return ap.parse_args()


def available(names) -> tuple[list[str], dict[str, str]]:
    """The methods whose solver function imports, and why the others do not."""
    ok, missing = [], {}
    for name in names:
        try:
            solver_function(name)
            ok.append(name)
        except Exception as exc:
            missing[name] = f"{type(exc).__name__}: {exc}"
    return ok, missing


def run(instance, method: str, time_limit: float) -> cp.Result:
    """``chainpipe.solve``; a solver that raises is recorded as an ``error`` result."""
    start = time.perf_counter()
    try:
        return cp.solve(instance, method, time_limit=time_limit)
    except Exception as exc:
        return cp.Result(instance.name, method, "error", None, None, None,
                         time.perf_counter() - start, f"{type(exc).__name__}: {exc}")


def geomean(values) -> float | None:
    vals = [v for v in values if v is not None and math.isfinite(v) and v > 0]
    return statistics.geometric_mean(vals) if vals else None


def fmt(x, digits: int = 3, pct: bool = False) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "--"
    if pct:
        return f"{100 * x:+.1f}%"
    return f"{x:.{digits}f}"


def machine() -> str:
    return (f"{os.cpu_count()} cores, Python {platform.python_version()}, "
            f"{platform.system()} {platform.machine()}")


def table(header: list[str], rows: list[list]) -> str:
    """A Markdown table (the harness's own writer, so every table is escaped alike)."""
    from chainpipe.compare.report import markdown

    return markdown(header, [[str(c) for c in r] for r in rows])


def publish(name: str, title: str, fig, intro: str, sections: list[str], quick: bool,
            elapsed: float, missing: dict[str, str]) -> None:
    """Save the figure and the Markdown table of experiment ``name`` into results/."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    figure = RESULTS / f"{name}.png"
    fig.tight_layout()
    fig.savefig(figure, dpi=120)
    path = RESULTS / f"{name}.md"
    mode = "--quick" if quick else "full"
    lines = [f"# {title}", "",
             (f"Machine: {machine()}. Run: `python experiments/{name}.py"
              f"{' --quick' if quick else ''}` ({mode}), {elapsed:.0f} s in all."), "",
             intro.strip(), ""]
    for s in sections:
        lines += [s.strip(), ""]
    if missing:
        lines.append("Methods not run (their solver did not import in this checkout):")
        lines += [f"- `{k}`: {v}" for k, v in missing.items()]
        lines.append("")
    path.write_text("\n".join(lines), encoding="utf-8")
    print(f"wrote {path} and {figure}")


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


#: one style per method so the figures read alike
STYLE = {
    "dp": {"color": "black", "marker": "o", "lw": 2.2},
    "cdynp": {"color": "tab:red", "marker": "s", "ls": "--", "lw": 1.8},
    "comm-unaware": {"color": "tab:purple", "marker": "v"},
    "single-dc": {"color": "tab:brown", "marker": "D"},
    "uniform-chain": {"color": "tab:blue", "marker": "^"},
    "proportional": {"color": "tab:green", "marker": "P"},
    "uniform": {"color": "tab:orange", "marker": "x"},
    "greedy-fill": {"color": "tab:gray", "marker": "*"},
    "ilp-assign": {"color": "tab:olive", "marker": "<"},
    "ilp-path": {"color": "tab:cyan", "marker": ">"},
    "cpsat": {"color": "tab:pink", "marker": "h"},
}
