"""The top-level README lists every notebook in notebooks/, once, and links the guide to
which exact route to run."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_readme_lists_every_notebook_once():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        assert readme.count(f"`notebooks/{path.name}`:") == 1, f"README.md: list {path.name} once"


def test_the_readme_links_which_exact_route_to_run():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "docs/model.md#which-exact-route-to-run" in readme
    model = (ROOT / "docs" / "model.md").read_text(encoding="utf-8")
    assert re.search(r"^## Which exact route to run$", model, re.M)
