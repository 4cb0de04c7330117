"""The comparison figures: profiles that reach 1, solvers that stay apart, no zigzag."""

from __future__ import annotations

import math

from chainpipe.compare import metrics
from chainpipe.compare.figures import _trend, performance_profile, solver_style, time_vs_size
from chainpipe.compare.report import write_figures


def _rec(inst, solver, T, status="optimal", t=1.0, **extra):
    rec = {"instance_path": inst, "instance": inst, "solver": solver, "seed": 0,
           "status": status, "iteration_time_s": T, "lower_bound_s": T, "gap": 0.0,
           "solve_time_s": t, "time_limit_s": 10.0, "threads": 1, "exact": True,
           "num_layers": 4, "num_devices": 2, "num_datacenters": 1, "num_device_types": 1,
           "stats": {}}
    rec.update(extra)
    return rec


def test_quality_profile_leaves_out_problems_without_any_plan():
    recs = [_rec("a", "dp", 2.0), _rec("a", "greedy", 3.0),
            _rec("x", "dp", None, "infeasible"), _rec("x", "greedy", None, "no_solution")]
    q = metrics.performance_profile(recs, "quality")
    assert q["problems"] == 1 and q["left_out"] == [("x", 0)]
    assert q["ratios"] == {"dp": [1.0], "greedy": [1.5]}
    # every curve reaches 1 at a large enough tau
    assert all(metrics.profile_curve(r, [100.0]) == [1.0] for r in q["ratios"].values())
    # time profiles keep every problem: a proven infeasibility is a finished run
    t = metrics.performance_profile(recs, "time")
    assert t["problems"] == 2 and t["left_out"] == []


def test_report_notes_the_left_out_problems(tmp_path):
    recs = [_rec("a", "dp", 2.0), _rec("x", "dp", None, "infeasible")]
    figures = write_figures(recs, tmp_path)
    assert any("1 problem(s) without any plan" in what for what in figures)
    assert (tmp_path / "profile_quality.png").exists()


def test_solvers_get_distinct_styles_and_coinciding_curves_stay_visible():
    from chainpipe.solve import available_solvers

    n = max(12, len(available_solvers()))  # `--solvers all`, and then some
    styles = [solver_style(i, n) for i in range(n)]
    assert len({s["color"] for s in styles}) == n
    assert len({(s["color"], str(s["linestyle"]), s["marker"]) for s in styles}) == n
    for a, b in zip(styles, styles[1:]):  # neighbours differ in every respect
        assert a["color"] != b["color"] and a["linestyle"] != b["linestyle"] \
            and a["marker"] != b["marker"]
        assert a["linewidth"] > b["linewidth"] and a["zorder"] < b["zorder"]


def test_identical_exact_solvers_are_all_drawn(tmp_path):
    import csv

    recs = [_rec(f"i{k}", s, 1.0 + k) for k in range(3) for s in ("dp", "cpsat", "ilp-path")]
    path = performance_profile(metrics.performance_profile(recs, "quality"), tmp_path / "q.png")
    with open(path.with_suffix(".csv")) as fh:
        rows = list(csv.DictReader(fh))
    assert {r["solver"] for r in rows} == {"dp", "cpsat", "ilp-path"}


def test_time_against_size_is_a_trend_in_order_of_size(tmp_path):
    xs, ys = _trend([(40, 1.0), (8, 2.0), (40, 4.0), (8, 8.0), (20, 3.0)])
    assert xs == [8, 20, 40]
    assert ys == [4.0, 3.0, 2.0] or all(math.isclose(a, b) for a, b in zip(ys, [4.0, 3.0, 2.0]))
    recs = [_rec(f"i{k}", "dp", 1.0, t=0.1 * (k + 1), num_layers=4 + k % 3) for k in range(6)]
    assert time_vs_size(recs, tmp_path / "t.png").exists()


def test_a_solver_keeps_its_style_in_a_figure_of_some_solvers():
    from chainpipe.compare.figures import _styles

    order = ["dp", "cdynp", "uniform", "ilp-path"]
    assert _styles(["dp", "ilp-path"], order) == {"dp": solver_style(0, 4),
                                                  "ilp-path": solver_style(3, 4)}
    assert _styles(["x", "dp"], None) == {"x": solver_style(0, 2), "dp": solver_style(1, 2)}
