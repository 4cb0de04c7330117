"""The version-3 search's kernels compiled ahead of time (``label_aot.Unit``:
``period_kernel`` and ``prefix_kernel``; and CDynP's agents': ``cdynp.period_fast``,
``cdynp.local_aot``): the search passes them exactly the argument
types they are compiled for, a unit built and bound hands out its compiled kernels (other
types and the kernels it does not compile go to numba's just-in-time kernels, and numba
code calling a handed-out kernel compiles), and the built modules give the search's
answers without numba."""

import pickle
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import chainpipe as cp
from chainpipe.solvers import dp_period, label_aot, period_kernel, prefix_curve, prefix_kernel
from chainpipe.solvers.cdynp import alone, local_aot, period_fast
from chainpipe.solvers.cdynp import local as cdynp_local

numba = pytest.importorskip("numba")

ROOT = Path(__file__).resolve().parents[1]
SMALL = sorted((ROOT / "instances" / "v3" / "small").glob("v3-*.json"))
MEDIUM = [ROOT / "instances" / "v3" / "medium" / name
          for name in ("v3-medium-01.json", "v3-medium-04-gpipe.json")]
UNITS = (period_kernel.UNIT, prefix_kernel.UNIT)


#: the prefix unit's kernels :mod:`.prefix_curve` calls
PREFIX = ("forward", "bottleneck", "at_most")


def _kernels(jit: bool):
    """What :mod:`.dp_period` and :mod:`.prefix_curve` call: numba's just-in-time
    kernels, or the kernel modules' own names (compiled when built): the period unit,
    and the prefix unit's :data:`PREFIX`."""
    if not jit:
        return (period_kernel, *(getattr(prefix_kernel, n) for n in PREFIX))
    consts = {n: getattr(period_kernel, n) for n in ("PLAIN", "LOOPS", "PHASES")}
    prefix = prefix_kernel.UNIT.jit()
    return (SimpleNamespace(**consts, **vars(period_kernel.UNIT.jit())),
            *(getattr(prefix, n) for n in PREFIX))


def _use(monkeypatch, kernels) -> None:
    monkeypatch.setattr(dp_period, "kernel", kernels[0])
    for name, fn in zip(PREFIX, kernels[1:]):
        monkeypatch.setattr(prefix_curve, name, fn)


def _spy(seen: dict):
    """A wrapper factory that records in ``seen`` the numba types of every call of a
    kernel, per ``(unit, name)``."""
    def spy(unit, name, fn):
        def call(*args):
            seen.setdefault((unit, name), set()).add(tuple(numba.typeof(a) for a in args))
            return fn(*args)
        return call
    return spy


def _assert_types(seen: dict, units) -> None:
    """Every kernel of ``units`` was called, always with exactly the types its ``ARGS``
    names."""
    from numba.core.sigutils import normalize_signature

    want = {(u.name, n): k for u in units for n, k in u.args.items()}
    assert set(seen) == set(want)
    for key, kinds in want.items():
        sig = normalize_signature(f"({label_aot.signature(kinds)},)")[0]
        assert seen[key] == {tuple(sig)}, key


def test_the_search_passes_the_compiled_types(monkeypatch):
    """Every kernel of the two units' ``ARGS`` is called by dp's version-3 search or
    CDynP's front ends (:func:`.dp_period.pareto`, ``across_usage``, ``hull_prepend``,
    ``new_loops``) on the small set, always with exactly the types ``ARGS`` names."""
    seen: dict = {}
    spy = _spy(seen)

    # the kernels dp runs (compiled when built, so nothing is compiled just in time
    # here; a call of other types would still reach numba's kernel and be recorded)
    period, *prefix = _kernels(jit=False)
    period = SimpleNamespace(**{n: getattr(period, n) for n in ("PLAIN", "LOOPS", "PHASES")},
                             **{n: spy("period", n, getattr(period, n)) for n in period_kernel.ARGS})
    _use(monkeypatch, (period, *(spy("prefix", n, fn) for n, fn in zip(PREFIX, prefix))))
    for path in SMALL:
        inst = cp.read(path)
        for solver in ("dp", "cdynp"):
            assert cp.solve(inst, solver, time_limit=60).status == "optimal", path.name
    _assert_types(seen, UNITS)


def test_tuples_and_bool_arrays_are_checked():
    """A tuple argument passes the check only as a tuple of its length whose items pass
    theirs; a bool array only as one (the other calls are handed over)."""
    kinds = ("b1", ("f3", "f3", "f1"), "i")
    handed = []
    kernel = label_aot._checked("k", lambda *a: "compiled", kinds,
                                lambda name, *a: handed.append(name) or "jit")
    good = [np.zeros(2, dtype=bool), (np.zeros((1, 1, 1)), np.ones((1, 2, 1)), np.zeros(3)), 4]
    assert kernel(*good) == "compiled"
    curve = good[1]
    changes = [(0, np.zeros(2, dtype=np.int64)), (0, np.zeros(2)), (1, list(curve)),
               (1, curve[:2]), (1, (*curve, curve[2])), (1, (curve[0], curve[2], curve[2])),
               (1, (curve[0], curve[1], np.zeros(3, dtype=np.int64))),
               (1, (curve[0], np.ones((1, 2, 2))[:, :, 0], curve[2])), (2, True)]
    for i, value in changes:
        args = list(good)
        args[i] = value
        assert kernel(*args) == "jit", (i, value)
    assert handed == ["k"] * len(changes)
    assert label_aot.signature(kinds) == (
        "boolean[::1], Tuple((float64[:, :, ::1], float64[:, :, ::1], float64[::1],)), int64")


@pytest.mark.parametrize("path", [*SMALL, *MEDIUM], ids=lambda p: p.stem)
def test_the_compiled_modules_give_the_same_answers(monkeypatch, path):
    """dp (and on the small set CDynP) on the compiled modules (built by ``python -m
    chainpipe.solvers.label_aot``) and on the just-in-time kernels: the same status,
    ``T``, plan and counts, no call handed over."""
    if not isinstance(period_kernel.expand, label_aot.Kernel) or \
            not isinstance(prefix_kernel.forward, label_aot.Kernel):
        pytest.skip("not built for these sources: python -m chainpipe.solvers.label_aot")
    for unit in UNITS:
        monkeypatch.setattr(unit, "handed", {})
    inst = cp.read(path)
    for solver in ("dp", "cdynp") if path in SMALL else ("dp",):
        got = []
        for jit in (True, False):
            _use(monkeypatch, _kernels(jit))
            res = cp.solve(inst, solver, time_limit=60)
            got.append((res.status, res.iteration_time, res.plan, res.stats.get("searches"),
                        res.stats.get("labels"), res.stats.get("range_runs")))
        assert got[0] == got[1], (path.name, solver)
    assert [u.handed for u in UNITS] == [{}, {}]


def test_a_handed_out_kernel_pickles_by_name():
    """A compiled kernel pickles as its module's name for it (a forked or Dask worker
    unpickles the kernel its own module hands out)."""
    if not isinstance(period_kernel.expand, label_aot.Kernel):
        pytest.skip("not built for these sources: python -m chainpipe.solvers.label_aot")
    for kernel in (period_kernel.expand, period_kernel.collect, prefix_kernel.forward,
                   prefix_kernel.bottleneck):
        assert pickle.loads(pickle.dumps(kernel)) is kernel
    code = ("import pickle, sys; from chainpipe.solvers import period_kernel as k; "
            "print(pickle.loads(sys.stdin.buffer.read()) is k.gather)")
    out = subprocess.run([sys.executable, "-c", code], input=pickle.dumps(period_kernel.gather),
                         capture_output=True, timeout=120, check=True).stdout
    assert out.split() == [b"True"]


def _fresh_solves(solver: str, files, limit: float) -> list[str]:
    """The status of ``solver`` on each of ``files`` in a fresh process, then whether
    numba was imported (``"True"``/``"False"``)."""
    code = ("import sys, chainpipe as cp\n"
            f"for f in {[str(p) for p in files]!r}:\n"
            f"    print(cp.solve(cp.read(f), {solver!r}, time_limit={limit}).status)\n"
            "print('numba' in sys.modules)\n")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, check=True).stdout.split()


def test_a_v3_solve_never_imports_numba():
    """With every unit built, a fresh process solves version-3 instances (one pipeline,
    several, GPipe) without importing numba."""
    if any(not u.location().exists() for u in (label_aot.LABEL, *UNITS)):
        pytest.skip("not built for these sources: python -m chainpipe.solvers.label_aot")
    files = (SMALL[0], SMALL[1], MEDIUM[1])
    assert _fresh_solves("dp", files, 60) == ["optimal"] * 3 + ["False"]


def _inner(x, k):
    return x[k] * 2.0


def _outer(x, k):
    s = 0.0
    for j in range(k):
        s += _inner(x, j)  # a kernel calling a kernel
    return s


def _unit():
    """A unit of two kernels, ``_outer`` compiled, ``_inner`` only called by it."""
    unit = label_aot.Unit("test", {"_outer": ("f1", "i")}, ("solvers/label_aot.py",))
    unit.kernel(_inner)
    unit.kernel(_outer)
    return unit


def test_a_unit_built_and_bound(monkeypatch, tmp_path):
    """Not built, a unit binds numba's kernels; built (into ``NUMBA_CACHE_DIR``), a unit
    of the same sources binds :class:`.label_aot.Kernel` objects that run the compiled
    kernel without numba's (a call with other types handed to it and counted), the
    kernel it does not compile by numba's, and that numba code calling one compiles."""
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    x = np.arange(5.0)
    unit, ns = _unit(), {"np": np, "__name__": __name__}  # as a module's globals
    unit.bind(ns)
    assert isinstance(ns["_outer"], numba.core.registry.CPUDispatcher)
    assert ns["_outer"](x, 4) == 12.0
    assert unit.build() == unit.location() and unit.location().parent == tmp_path
    built, ns = _unit(), {"np": np, "__name__": __name__}
    built.bind(ns)
    outer, inner = ns["_outer"], ns["_inner"]
    assert isinstance(outer, label_aot.Kernel) and isinstance(inner, label_aot.Kernel)
    assert outer(x, 4) == 12.0 and outer(x, np.int64(3)) == 6.0
    assert built._jit is None and built.handed == {}  # the compiled kernel ran
    assert outer(x.astype(np.int32), 4) == 12.0 and outer(x, np.int32(4)) == 12.0
    assert built.handed == {"_outer": 2} and built._jit is not None
    assert inner(x, 3) == 6.0

    @numba.njit
    def twice(y):
        return outer(y, 2) + inner(y, 1)

    assert twice(x) == 2.0 + 2.0


# CDynP's agents' units: the period DP (cdynp.period_fast) and the classic DP's label
# kernels (cdynp.local_aot)
CDYNP_UNITS = (period_fast.UNIT, local_aot.UNIT)


def _agents_kernels(monkeypatch, jit: bool) -> None:
    """Make CDynP's agents call numba's just-in-time kernels (``jit``) or what their
    modules hand out (compiled when built)."""
    if jit:
        fast = period_fast.UNIT.jit()
        for name in period_fast.ARGS:
            monkeypatch.setattr(period_fast, name, getattr(fast, name))
        monkeypatch.setattr(cdynp_local, "kernel", local_aot.UNIT.jit())
    else:
        monkeypatch.setattr(cdynp_local, "kernel", local_aot.load())


def test_cdynp_passes_the_compiled_types(monkeypatch):
    """Every kernel of CDynP's two units' ``ARGS`` is called by its agents on the small
    set and ``v3-medium-04-gpipe``, always with exactly the types ``ARGS`` names."""
    seen: dict = {}
    spy = _spy(seen)

    # the kernels the agents run (compiled when built: nothing compiled just in time)
    for name in period_fast.ARGS:
        monkeypatch.setattr(period_fast, name,
                            spy("cdynp_period", name, getattr(period_fast, name)))
    local = SimpleNamespace(new_arena=label_aot.new_arena, grown=label_aot.grown)
    for name in local_aot.ARGS:
        setattr(local, name, spy("cdynp_local", name, getattr(cdynp_local.kernel, name)))
    monkeypatch.setattr(cdynp_local, "kernel", local)
    for path in [*SMALL, MEDIUM[1]]:
        res = cp.solve(cp.read(path), "cdynp", time_limit=120)
        assert res.status == "optimal", path.name
    _assert_types(seen, CDYNP_UNITS)


@pytest.mark.parametrize("path", [*SMALL[:3], MEDIUM[0]], ids=lambda p: p.stem)
def test_cdynp_on_its_compiled_modules(monkeypatch, path):
    """CDynP on its agents' compiled modules and on the just-in-time kernels: the same
    status, ``T``, plan, range runs and labels, no call handed over."""
    if not isinstance(period_fast.extend, label_aot.Kernel) or \
            not local_aot.UNIT.location().exists():
        pytest.skip("not built for these sources: python -m chainpipe.solvers.label_aot")
    for unit in CDYNP_UNITS:
        monkeypatch.setattr(unit, "handed", {})
    inst = cp.read(path)
    got = []
    for jit in (True, False):
        alone.forget()  # each solve from none (the DCs' one-DC memories)
        with monkeypatch.context() as m:
            _agents_kernels(m, jit)
            res = cp.solve(inst, "cdynp", time_limit=120)
        got.append((res.status, res.iteration_time, res.plan, res.stats.get("range_runs"),
                    res.stats.get("labels")))
    assert got[0] == got[1], path.name
    assert [u.handed for u in CDYNP_UNITS] == [{}, {}]
    assert got[0][0] == "optimal"


def test_a_v3_cdynp_solve_never_imports_numba():
    """With every unit built, a fresh process solves version-3 instances with ``cdynp``
    (one pipeline and several, GPipe) and a ``hybrid`` one without importing numba."""
    if any(not u.location().exists() for u in label_aot.units()):
        pytest.skip("not built for these sources: python -m chainpipe.solvers.label_aot")
    files = (SMALL[0], SMALL[1], MEDIUM[1],
             ROOT / "instances" / "hybrid" / "medium" / "hybrid-medium-01.json")
    assert _fresh_solves("cdynp", files, 120) == ["optimal"] * 4 + ["False"]


def test_the_build_reports_a_failed_unit_and_names_the_units():
    """The units build in child processes side by side (``make``'s step); a child that
    fails makes the build fail, and an unknown unit is named in one line."""
    assert label_aot._build_side_by_side(["no-such-unit", "nor-this"], 2) == 1
    done = subprocess.run([sys.executable, "-m", "chainpipe.solvers.label_aot", "--unit",
                           "no-such-unit"], capture_output=True, text=True, cwd=ROOT,
                          timeout=120)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "label, period, prefix" in done.stderr


def test_every_unit_built_is_named_and_nothing_rebuilt():
    if not all(u.location().exists() for u in label_aot.units()):
        pytest.skip("not built for these sources: python -m chainpipe.solvers.label_aot")
    done = subprocess.run([sys.executable, "-m", "chainpipe.solvers.label_aot"],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0
    assert done.stdout.split() == [str(u.location()) for u in label_aot.units()]
