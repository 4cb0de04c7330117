"""What ``chainpipe simulate`` draws and says: every figure has a title, no two policies'
curves share a colour, marker and line style (so one cannot hide another), and
``summary.md`` says in a sentence when a forecast loses to the naive last-value one."""

from __future__ import annotations

import math

import pytest

from chainpipe.online.catalogue import POLICIES
from chainpipe.online.command import run_policies
from chainpipe.online.presets import preset
from chainpipe.online.report import (
    forecast_verdict,
    iteration_time_figure,
    style,
    summary_markdown,
    utilisation_figure,
)

LOSING = {"gm11": {"n": 5796, "mae": 0.166, "rmse": 0.26},
          "gm11-markov": {"n": 5796, "mae": 0.152, "rmse": 0.25},
          "last-value": {"n": 5796, "mae": 0.110, "rmse": 0.21}}
WINNING = {"gm11": {"n": 40, "mae": 0.05, "rmse": 0.07},
           "gm11-markov": {"n": 40, "mae": 0.04, "rmse": 0.06},
           "last-value": {"n": 40, "mae": 0.110, "rmse": 0.21}}


@pytest.fixture(scope="module")
def tiny():
    """Every policy on the ``tiny`` preset, 4 requests (about a second)."""
    scenario = preset("tiny").with_jobs(4)
    return scenario, run_policies(scenario, list(POLICIES), scenario.seed)


@pytest.fixture()
def pyplot():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    yield plt
    plt.close("all")


def titles(fig) -> list[str]:
    out = [fig._suptitle.get_text()] if fig._suptitle is not None else []
    return [t for t in out + [ax.get_title() for ax in fig.axes] if t.strip()]


def curve_looks(ax) -> list[tuple]:
    """(colour, marker, line style) of each drawn curve of ``ax``."""
    return [(line.get_color(), line.get_marker(), line.get_linestyle())
            for line in ax.get_lines() if line.get_label() and not line.get_label().startswith("_")]


@pytest.mark.parametrize("build", [utilisation_figure, iteration_time_figure])
def test_every_figure_has_a_title_and_curves_that_cannot_hide_each_other(tiny, pyplot, build):
    _, runs = tiny
    fig = build(runs)
    assert titles(fig), f"{build.__name__}: no title"
    assert any("policy" in t for t in titles(fig))
    for ax in fig.axes:
        looks = curve_looks(ax)
        assert len(looks) == len(runs)
        markers = [m for _, m, _ in looks]
        dashes = [ls for _, _, ls in looks]
        assert all(m not in (None, "", "None") for m in markers), "every curve has markers"
        assert len(set(markers)) == len(runs), f"markers repeat: {markers}"
        assert len(set(dashes)) >= min(4, len(runs)), f"line styles repeat: {dashes}"
        # later curves thinner and above: a curve drawn over another never covers it whole
        lines = [ln for ln in ax.get_lines() if not ln.get_label().startswith("_")]
        widths = [ln.get_linewidth() for ln in lines]
        orders = [ln.get_zorder() for ln in lines]
        assert widths == sorted(widths, reverse=True) and len(set(widths)) > 1
        assert orders == sorted(orders) and len(set(orders)) == len(lines)
        assert all(ln.get_alpha() is not None and ln.get_alpha() < 1 for ln in lines)


def test_no_two_policies_look_alike():
    looks = [(s["color"], s["marker"], s["linestyle"]) for s in map(style, range(84))]
    assert len(set(looks)) == len(looks)


def test_a_forecast_that_loses_to_the_last_value_is_said_in_a_sentence():
    text = forecast_verdict(LOSING)
    assert "GM(1,1) (MAE 0.166) and grey-Markov (MAE 0.152) lose to the naive last-value " \
           "forecast** (MAE 0.11)" in text
    assert "gmc-mdp" in text and text.endswith(".")
    # only one of them losing: it alone is named, the other is said to win
    mixed = dict(LOSING, gm11={"n": 5796, "mae": 0.10, "rmse": 0.2})
    text = forecast_verdict(mixed)
    assert "grey-Markov (MAE 0.152) loses to the naive" in text
    assert "GM(1,1) (MAE 0.1) beats the naive last-value forecast (MAE 0.11)." in text


def test_no_losing_sentence_when_the_forecasts_win_or_were_never_scored():
    assert "lose" not in forecast_verdict(WINNING)
    assert forecast_verdict(WINNING).startswith("GM(1,1) (MAE 0.05) and grey-Markov")
    unscored = {m: {"n": 0, "mae": math.nan, "rmse": math.nan} for m in LOSING}
    assert forecast_verdict(unscored) == ""
    assert forecast_verdict({}) == ""


def test_summary_md_says_when_the_forecast_loses(tiny):
    scenario, runs = tiny
    gmc = next(r for r in runs if r.policy == "gmc-mdp")
    gmc.extra["forecast"] = LOSING
    try:
        md = summary_markdown(runs, scenario, scenario.seed)
    finally:
        del gmc.extra["forecast"]
    table_end = md.index("| last-value | 5796 | 0.11 | 0.21 |")
    sentence = md[table_end:]
    assert "lose to the naive last-value forecast" in sentence
    assert "gmc-mdp" in sentence
    gmc.extra["forecast"] = WINNING
    try:
        md = summary_markdown(runs, scenario, scenario.seed)
    finally:
        del gmc.extra["forecast"]
    assert "lose to" not in md and "beat the naive last-value forecast" in md
