"""``--help`` shows every default and every closed set of choices; ``--version``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import chainpipe
from chainpipe.cli import main
from chainpipe.instance import SCHEDULES
from chainpipe.instances import MODELS, PRESETS
from chainpipe.solve import SOLVERS

ROOT = Path(__file__).resolve().parents[1]


def help_text(capsys, *command) -> str:
    assert main([*command, "--help"]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    return " ".join(out.split())  # argparse wraps lines: compare with whitespace folded


def test_version(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"chainpipe {chainpipe.__version__}\n"


def test_top_level_help_lists_every_command_and_the_exit_statuses(capsys):
    text = help_text(capsys)
    for command in ("validate", "solve", "evaluate", "generate", "split", "compare", "plot",
                    "solvers"):
        assert f" {command} " in text
    assert "130 interrupted" in text


def test_solve_help_lists_every_solver_with_its_line_and_the_defaults(capsys):
    text = help_text(capsys, "solve")
    for info in SOLVERS.values():
        kind = "exact" if info.exact else "heuristic"
        assert f"{info.name} {kind} {' '.join(info.summary.split())}" in text
    assert "one of " + ", ".join(SOLVERS) + " (default: dp)" in text
    assert "threads a backend may use (default: 1)" in text
    assert "(default: 0)" in text  # --seed
    assert "output: table, json (default: table)" in text
    assert "--log, --verbose" in text and "--strict" in text
    assert "(default: None)" not in text and "(default: False)" not in text


def test_generate_help_lists_presets_models_and_schedules(capsys):
    text = help_text(capsys, "generate")
    for name, description in PRESETS.items():
        assert f"{name} {' '.join(description.split())}" in text
    assert "one of " + ", ".join(PRESETS) in text
    assert ", ".join(MODELS) in text
    assert ", ".join(SCHEDULES) in text
    assert "the same seed gives the same instance (default: 0)" in text


def test_validate_help_says_what_a_manifest_is(capsys):
    text = help_text(capsys, "validate")
    assert "A directory stands for its *.json files except manifest.json" in text
    assert "describes an instance set" in text and "--strict" in text


def test_compare_help_documents_all_and_its_defaults(capsys):
    text = help_text(capsys, "compare")
    assert "or 'all' for every installed solver" in text
    assert "--seeds N (default: 1)" in text  # an option without help text shows it too
    assert "--time-limit S" in text and "(default: 60.0)" in text


def test_help_imports_no_solver_backend():
    """Solver names come from the registry: building the help loads no heavy module."""
    code = ("import sys; from chainpipe.cli import build_parser; build_parser().format_help(); "
            "print(sorted(m for m in ('ortools', 'pulp', 'highspy', 'matplotlib', 'dask') "
            "if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, check=True)
    assert proc.stdout == "[]\n"
