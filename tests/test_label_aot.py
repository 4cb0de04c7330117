"""The label kernel compiled ahead of time (``chainpipe.solvers.label_aot``): dp passes
the kernels exactly the argument types they are compiled for, a call with other types
goes to the just-in-time kernel, and the compiled module (when built) gives dp's answers
label for label."""

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import chainpipe as cp
from chainpipe.solvers import label_aot, label_kernel
from chainpipe.solvers.dp import distinct

ROOT = Path(__file__).resolve().parents[1]
#: gpipe and 1F1B, one and several DCs, memory-bound, no plan at all, data parallelism, the
#: version-3 period search (its chain floors per position)
FILES = [ROOT / "instances" / name for name in (
    "small/small-01-tiny.json", "small/small-02-gpipe.json", "small/small-04-mem-gpipe.json",
    "small/small-06-one-dc.json", "small/small-infeasible.json",
    "hybrid/small/hybrid-small-01.json", "hybrid/small/hybrid-small-02-gpipe-nozero.json",
    "hybrid/small/hybrid-small-03-one-dc.json", "hybrid/small/hybrid-small-05-mem.json",
    "v3/small/v3-small-01-period.json")]


class _Spy:
    """dp's kernels, each call's argument types recorded (numba's types)."""

    def __init__(self):
        import numba

        self.seen: dict = {}
        # the kernels dp runs: the compiled module's when built (its calls of other types
        # still go to numba's kernels, and are recorded), so nothing compiles here
        kernels = label_aot._compiled() or label_kernel
        self.new_arena, self.grown, self.warm = kernels.new_arena, kernels.grown, kernels.warm
        for name in label_aot.ARGS:
            setattr(self, name, self._spy(name, getattr(kernels, name), numba.typeof))

    def _spy(self, name, fn, typeof):
        def call(*args):
            self.seen.setdefault(name, set()).add(tuple(typeof(a) for a in args))
            return fn(*args)
        return call


def test_dp_passes_the_compiled_types(monkeypatch):
    """Every kernel of ``ARGS`` is called by dp on these instances, always with exactly
    the types ``ARGS`` names (what the compiled module is built for)."""
    from numba.core.sigutils import normalize_signature

    spy = _Spy()
    monkeypatch.setattr(label_aot, "_loaded", [spy])
    for path in FILES:
        cp.solve(cp.read(path), "dp", time_limit=60)
    assert set(spy.seen) == set(label_aot.ARGS)
    for name, kinds in label_aot.ARGS.items():
        want = normalize_signature(f"({label_aot.signature(kinds)},)")[0]
        assert spy.seen[name] == {tuple(want)}, name


def test_other_types_go_to_the_jit_kernel(monkeypatch):
    """A call whose arguments differ from ``ARGS`` in dtype, dimensions, layout or
    scalar type reaches the just-in-time kernel, never the compiled one (whose wrapper
    would read the memory as the compiled types)."""
    monkeypatch.setattr(label_aot, "_jit", lambda: SimpleNamespace(crossing_gain=lambda *a: "jit"))
    monkeypatch.setattr(label_aot.LABEL, "handed", {})
    kernel = label_aot._checked("crossing_gain", lambda *a: "compiled",
                                label_aot.ARGS["crossing_gain"])
    good = [np.zeros(1), 0.0, np.zeros(2), 1, np.zeros(2), 1.0, np.zeros(2)]
    assert kernel(*good) == "compiled"
    assert kernel(np.zeros(1), np.float64(0.0), *good[2:3], np.int64(1), *good[4:]) == "compiled"
    changes = [(0, np.zeros(1, dtype=np.int64)), (0, np.zeros(1, dtype=np.float32)),
               (0, np.zeros((2, 2))[:, 0]), (0, np.zeros((1, 1))), (0, [0.0]),
               (1, 0), (3, 1.0), (3, True), (3, np.int32(1))]
    for i, value in changes:
        args = list(good)
        args[i] = value
        assert kernel(*args) == "jit", (i, value)
    assert label_aot.LABEL.handed == {"crossing_gain": len(changes)}


def test_the_compiled_module_gives_the_same_answers(monkeypatch):
    """dp on the compiled module (built by ``python -m chainpipe.solvers.label_aot``) and
    on the just-in-time kernels: the same status, ``T``, plan and label counts, no call
    handed over."""
    compiled = label_aot._compiled()
    if compiled is None:
        pytest.skip("not built for these sources: python -m chainpipe.solvers.label_aot")
    monkeypatch.setattr(label_aot.LABEL, "handed", {})
    for path in [*FILES, ROOT / "instances" / "hybrid" / "medium" / "hybrid-medium-05-mem.json"]:
        inst = cp.read(path)
        got = []
        for kernels in (label_kernel, compiled):
            monkeypatch.setattr(label_aot, "_loaded", [kernels])
            res = cp.solve(inst, "dp", time_limit=60)
            got.append((res.status, res.iteration_time, res.plan, res.stats.get("labels"),
                        [t.get("labels") for t in res.stats.get("trials", [])]))
        assert got[0] == got[1], path.name
    assert label_aot.LABEL.handed == {}


def test_distinct_is_numpy_unique():
    """``dp.distinct`` (numpy.unique without its import of numpy.ma) on random arrays."""
    rng = np.random.default_rng(0)
    for _ in range(300):
        a = rng.integers(0, 5, size=rng.integers(0, 9)).astype(rng.choice([np.float64, np.int64]))
        want = np.unique(a)
        got = distinct(a)
        assert got.dtype == want.dtype and np.array_equal(got, want)
    a = np.array([[3.0, -0.5], [1.0, 3.0]])
    assert np.array_equal(distinct(a), np.unique(a))
