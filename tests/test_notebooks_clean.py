"""The committed notebooks are clean sources: no outputs, no execution counts.

They are executed by ``make test`` (``pytest --nbmake notebooks``); this file checks
what is committed: valid nbformat 4, stripped of outputs and execution counts, the
time-limit knob in the first code cell and passed to every solve, and each notebook
listed in ``notebooks/README.md``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
PATHS = sorted(NOTEBOOKS.glob("*.ipynb"))
KNOB = 'TIME_LIMIT = float(os.environ.get("CHAINPIPE_NB_TIME_LIMIT", "10"))'
# calls that run a solver: each must receive the notebook's TIME_LIMIT
SOLVE_CALL = re.compile(r"\b(?:cp\.solve|run_sweep|run)\(")


def _load(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def _code_cells(nb: dict) -> list[str]:
    return ["".join(c["source"]) if isinstance(c["source"], list) else c["source"]
            for c in nb["cells"] if c["cell_type"] == "code"]


def _call_args(text: str, open_paren: int) -> str:
    """The text between the parenthesis at ``open_paren`` and its match."""
    depth = 0
    for i in range(open_paren, len(text)):
        if text[i] == "(":
            depth += 1
        elif text[i] == ")":
            depth -= 1
            if depth == 0:
                return text[open_paren + 1:i]
    raise AssertionError(f"unbalanced call at {text[open_paren - 20:open_paren + 40]!r}")


def test_the_notebooks_are_there():
    names = [p.name for p in PATHS]
    for want in ("01_quickstart.ipynb", "02_formulations.ipynb", "03_privacy.ipynb",
                 "04_multi_dc.ipynb", "05_hybrid.ipynb"):
        assert want in names


@pytest.mark.parametrize("path", PATHS, ids=[p.name for p in PATHS])
def test_valid_and_stripped(path):
    nbformat = pytest.importorskip("nbformat")
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    raw = _load(path)
    assert raw["nbformat"] == 4
    for i, cell in enumerate(raw["cells"]):
        where = f"{path.name} cell {i}"
        if cell["cell_type"] == "code":
            assert cell.get("outputs") == [], f"{where}: has outputs (strip them)"
            assert cell.get("execution_count") is None, f"{where}: has an execution count"
        assert "execution" not in cell.get("metadata", {}), f"{where}: execution timings"
        assert "attachments" not in cell, f"{where}: attachments"
    assert "widgets" not in raw.get("metadata", {}), f"{path.name}: widget state"


@pytest.mark.parametrize("path", PATHS, ids=[p.name for p in PATHS])
def test_time_limit_knob_reaches_every_solve(path):
    code = _code_cells(_load(path))
    assert code and KNOB in code[0], f"{path.name}: the first code cell must set {KNOB}"
    text = "\n".join(code)
    calls = 0
    for m in SOLVE_CALL.finditer(text):
        before = text[max(0, m.start() - 4):m.start()]
        if before.endswith("def "):
            continue  # a definition, not a call
        args = _call_args(text, m.end() - 1)
        assert "TIME_LIMIT" in args, f"{path.name}: {m.group(0)}{args[:80]}...) ignores TIME_LIMIT"
        calls += 1
    assert calls, f"{path.name}: no solve call found"


def test_readme_lists_each_notebook_once():
    readme = (NOTEBOOKS / "README.md").read_text(encoding="utf-8")
    for p in PATHS:
        assert readme.count(f"({p.name})") == 1, f"README.md must link {p.name} once"
