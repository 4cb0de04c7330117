"""The CDynP agents' label DP on the compiled kernel (``label_kernel.local_layer``,
``local_terms``, ``local_prepend``) against the Python definitions of
``chainpipe.solvers.labels`` it replaced: the same labels kept, in the same order, with
the same killers, on small random layers with many ties; and the candidate runs the
kernel takes equal the ones :meth:`LocalDP._candidates` lists."""

import math
import random

import numpy as np
import pytest

from chainpipe.solvers import label_kernel, labels
from chainpipe.solvers.cdynp.local import LocalDP
from chainpipe.tables import CostTables
from helpers import random_instance


def _layer(rng, n, n_states, groups, sync):
    """Random labels of a layer (few distinct values: ties) over distinct usage states;
    ``F``, ``I`` as ``local_layer`` takes them (label ``e``'s ``I[e, 1]`` is ``e``)."""
    F = np.column_stack((rng.integers(0, 4, n) / 2, rng.integers(0, 6, n) / 4,
                         rng.integers(0, 3, n) / 8 if sync else np.zeros(n)))
    every = np.array(np.meshgrid(*[range(3)] * groups)).reshape(groups, -1).T
    usage = every[rng.choice(len(every), n_states, replace=False)]
    I = np.zeros((n, 5), dtype=np.int64)
    I[:, 0] = rng.integers(0, 3, n)
    I[:, 1] = np.arange(n)
    I[:, 3] = rng.integers(0, n_states, n)
    return F, I, usage


def _python_layer(F, I, usage, sync, steady, p_cap):
    """What the Python filters kept: per state (first appearance order) the label
    indices in order, and their killers."""
    layer: dict = {}
    for e in range(len(F)):
        key = (0, tuple(usage[I[e, 3]]))
        layer.setdefault(key, []).append((F[e, 0], F[e, 1], int(I[e, 0]), F[e, 2], e))
    for key in list(layer):
        if sync:
            layer[key] = labels.shifted_pareto(labels.pareto4(layer[key]), steady + 1)
        else:
            layer[key] = labels.pareto3(layer[key], p_cap)
    if len(layer) > 1:
        labels.across_usage(layer, sync=sync)
    return [([lab[4] for lab in lst], labels.killers(lst)) for lst in layer.values()]


@pytest.mark.parametrize("sync", [False, True])
def test_local_layer_keeps_what_the_python_filters_keep(sync):
    rng = np.random.default_rng(11 + sync)
    for _ in range(300):
        n_states = int(rng.integers(1, 6))
        F, I, usage = _layer(rng, int(rng.integers(1, 50)), n_states, 2, sync)
        steady = int(rng.integers(0, 4))
        ids, starts, X, parents, kill = label_kernel.local_layer(F, I, usage, sync, steady,
                                                                 True)
        got = [(parents[starts[s]:starts[s + 1], 1].tolist(),
                kill[starts[s]:starts[s + 1]].tolist()) for s in range(len(ids))
               if starts[s + 1] > starts[s]]  # states left empty are listed too
        assert got == _python_layer(F, I, usage, sync, steady, 2)
        kept = parents[:, 1]
        assert (X[:, [0, 1, 3]] == F[kept]).all() and (X[:, 2] == I[kept, 0]).all()


def test_local_layer_without_across_filters_each_state_alone():
    rng = np.random.default_rng(5)
    for _ in range(100):
        F, I, usage = _layer(rng, int(rng.integers(1, 40)), 4, 2, True)
        ids, starts, _X, parents, _kill = label_kernel.local_layer(F, I, usage, True, 3, False)
        for s, sid in enumerate(ids.tolist()):
            mine = np.flatnonzero(I[:, 3] == sid)
            want = _python_layer(F[mine], I[mine], usage, True, 3, 2)[0][0]
            assert parents[starts[s]:starts[s + 1], 1].tolist() == mine[want].tolist()


@pytest.mark.parametrize("seed", range(8))
def test_kernel_runs_equal_the_listed_runs(seed):
    inst = random_instance(seed, max_layers=6, max_dcs=1)
    tables = CostTables(inst)
    rng = random.Random(seed)
    for ub in (math.inf, rng.uniform(0.01, 2.0)):
        for grid in (None, {0, 2, 3, tables.L}):
            lists = LocalDP(tables, position_cap=3)._candidates(ub, grid)
            arrays = LocalDP(tables, position_cap=3)._candidates(ub, grid, arrays=True)
            assert [[[(w, c, [tuple(row) for row in arr.tolist()]) for w, c, arr in per]
                     for per in per_g] for per_g in arrays] == \
                [[[(w, c, [tuple(map(float, t)) for t in lst]) for w, c, lst in per]
                  for per in per_g] for per_g in lists]


def test_local_extend_grows_the_arena_and_files_every_image():
    """An arena of one block lacks room: the kernel asks for more and does nothing; after
    :func:`label_kernel.grown` every image (no bound) of the runs that fit is filed for
    its start, with its run's pair, target state and its group's extension id."""
    X = np.array([[1.0, 2.0, 0.0, 0.0], [2.0, 1.0, 0.0, 0.0]])
    kill = np.array([2, 2])
    stages = np.array([[3.0, 0.5, 9.0, 0.0], [1.0, 0.7, 9.0, 0.0], [2.0, 0.1, 9.0, 0.0]])
    runs = np.array([[0, 1, 4, 2], [1, 1, 5, 3]])  # the second run's target: skipped
    targets, metas = np.array([7, -1]), np.array([3, 4])
    move = np.array([0.0, 0.0, math.inf, 3, 3, 0.0])
    pre = np.zeros((3, 5))
    arena = label_kernel.new_arena(4, blocks=1)
    args = (np.array([0, 0]), runs, stages, targets, metas, move, np.array([1, 2, 3, 4]), pre,
            np.zeros((0, 3)))
    cut, short = label_kernel.local_extend(X, kill, *args, *arena)
    assert short > 0 and not cut
    arena = label_kernel.grown(arena, short)
    cut, short = label_kernel.local_extend(X, kill, *args, *arena)
    assert (cut, short) == (False, 0)
    assert not len(label_kernel.take_layer(2, *arena)[0])
    for a in (3, 1):
        F, I = label_kernel.take_layer(a, *arena)
        assert sorted(I[:, 1].tolist()) == [0, 1]
        assert (I[:, 2] == 4).all() and (I[:, 3] == 7).all() and (I[:, 4] == 3).all()
        c = 0.5 if a == 3 else 0.7
        assert sorted(F[:, 1].tolist()) == sorted([2.0 + c, 1.0 + c])
