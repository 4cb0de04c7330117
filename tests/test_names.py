"""The one wording of unknown names (solvers, options, presets, models, GPUs)."""

import pytest

from chainpipe.cli import main
from chainpipe.names import did_you_mean, unknown_name
from chainpipe.solve import SOLVERS


def test_a_close_name_is_suggested():
    assert did_you_mean("dq", SOLVERS) == "; did you mean 'dp'?"
    assert unknown_name("solver", "cpsta", SOLVERS).startswith(
        "unknown solver 'cpsta'; did you mean 'cpsat'? known: dp, cdynp,")


def test_without_a_close_name_the_list_still_follows_a_semicolon():
    assert unknown_name("preset", "zzzz", ["tiny", "metro"]) == \
        "unknown preset 'zzzz'; known: tiny, metro"
    assert unknown_name("option", "x", []) == "unknown option 'x'; known: (none)"


def test_solve_with_a_mistyped_solver_suggests_it(capsys):
    assert main(["solve", "instances/small/small-01-tiny.json", "--solver", "dq"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "did you mean 'dp'?" in err[0]


@pytest.mark.parametrize("solver, option, needle", [
    ("dp", "upper_bound=abc", "option 'upper_bound' of dp: must be a number, got 'abc'"),
    ("cdynp", "epsilon=abc", "option 'epsilon' of cdynp: must be a number"),
    ("cdynp", "epsilon=-1", "option 'epsilon' of cdynp: must be a finite number >= 0, got -1"),
    ("cdynp", "digits=2.5", "option 'digits' of cdynp: must be an integer, got 2.5"),
    ("cpsat", "max_rounds=0", "option 'max_rounds' of cpsat: must be a finite number >= 1"),
    ("cpsat", "hint=greedy", "option 'hint' of cpsat: must be 'dp' or a Plan"),
])
def test_a_bad_option_value_is_bad_input_exit_2(capsys, solver, option, needle):
    code = main(["solve", "instances/small/small-01-tiny.json", "--solver", solver, "-O", option])
    out, err = capsys.readouterr()
    assert (code, out) == (2, "")
    assert err.strip().splitlines() == [err.strip()] and needle in err, err
