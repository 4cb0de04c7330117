"""What every figure module shares: matplotlib's Agg backend and atomic file writes.

A figure or its data is written to a temporary file beside the target and then
renamed (:func:`chainpipe.io.atomic_write`), so an interrupted command never
leaves half a file behind.
"""

from __future__ import annotations

import csv
import os
import warnings
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from .io import atomic_write


def pyplot():
    """``matplotlib.pyplot`` on the Agg backend (no display needed), imported on first use."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, path: str | os.PathLike, dpi: int = 120) -> Path:
    """Lay out ``fig`` and save it to ``path``, atomically.

    Parameters
    ----------
    fig : matplotlib Figure
        The figure.
    path : path
        Target file; its suffix names the format (``.png``, ``.svg``, ``.pdf``, ...).
        Missing parent directories are created.
    dpi : int
        Resolution of raster formats.

    Returns
    -------
    Path
        ``path``.
    """
    path = Path(path)
    fmt = path.suffix.lstrip(".").lower() or "png"
    # matplotlib's layout can divide by a zero-height box (seen once under a loaded test
    # run); that is its own arithmetic, never something a user can act on: keep it quiet
    with warnings.catch_warnings(), np.errstate(divide="ignore", invalid="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        fig.tight_layout()
        atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=dpi, format=fmt))
    return path


def write_csv(path: str | os.PathLike, header: list[str], rows: Iterable[list]) -> Path:
    """Write a CSV table atomically.

    Parameters
    ----------
    path : path
        Target file (missing parent directories are created).
    header : list of str
        Column names, the first line.
    rows : iterable of list
        One list of cells per line.

    Returns
    -------
    Path
        ``path``.
    """
    path = Path(path)

    def write(tmp: Path) -> None:
        with open(tmp, "w", newline="", encoding="utf-8") as fh:
            w = csv.writer(fh)
            w.writerow(header)
            w.writerows(rows)

    atomic_write(path, write)
    return path


def image_formats() -> set[str]:
    """File suffixes (without the dot) matplotlib can save a figure to."""
    plt = pyplot()
    fig = plt.figure()
    try:
        return set(fig.canvas.get_supported_filetypes())
    finally:
        plt.close(fig)
