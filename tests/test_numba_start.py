"""The leaner numba start is confined to processes chainpipe owns (chainpipe.numba_start)."""

import subprocess
import sys

import pytest

pytest.importorskip("numba")

_CHECK = """
import sys
{own}
from chainpipe.solvers import label_kernel, period_kernel  # noqa: F401 (each calls prepare)
import numba.np.arraymath as am
print(getattr(am, "_HAVE_BLAS", None), "scipy.linalg" in sys.modules)
"""


def _run(own: str) -> str:
    got = subprocess.run([sys.executable, "-c", _CHECK.format(own=own)], capture_output=True,
                         text=True, timeout=120, check=True)
    return got.stdout.strip()


def test_a_library_user_keeps_numba_whole():
    """Importing the kernels without owning the process hides nothing from numba."""
    blas, _ = _run("").split()
    assert blas != "False"


def test_an_owned_process_skips_the_probes():
    """After own_process (what the command line does) numba's array functions were
    imported with scipy.linalg hidden, and scipy.linalg is importable again."""
    out = _run("from chainpipe import numba_start; numba_start.own_process()")
    blas, loaded = out.split()
    assert blas == "False" and loaded == "False"
    check = ("from chainpipe import numba_start; numba_start.own_process(); "
             "numba_start.prepare(); import scipy.linalg; print('ok')")
    got = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True,
                         timeout=120, check=True)
    assert got.stdout.strip() == "ok"


def test_the_command_line_owns_its_process(monkeypatch):
    """chainpipe.cli.main declares the process its own."""
    from chainpipe import cli, numba_start

    monkeypatch.setattr(numba_start, "_owned", False)
    assert cli.main(["--version"]) == 0
    assert numba_start._owned
