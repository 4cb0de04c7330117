"""The one wording of unknown names (solvers, options, presets, models, GPUs)."""

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
