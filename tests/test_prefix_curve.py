"""The prefix curve (``chainpipe/solvers/prefix_curve.py``) against every placement of
small random v3 instances: its fills and periods are floors, never above what a real
prefix costs."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from chainpipe.solvers.prefix_curve import PrefixCurve
from chainpipe.tables import CostTables
from helpers import _path, _v3_configurations, contract_pipeline, random_v3_instance


def _prefix_fill(inst, stages) -> float:
    """The fill of ``stages`` from the contract: their compute and the traversals between
    them (not the one after the last)."""
    classic = dataclasses.replace(inst, training=dataclasses.replace(
        inst.training, objective="classic"))
    total = 0.0
    for q, (a, e, k, g, d, t) in enumerate(stages):
        total += contract_pipeline(classic, 1, [(a, e, k, g, d, t)])[0]  # C of the stage
        if q + 1 < len(stages):
            bw, lat = _path(inst, k, stages[q + 1][2])
            total += 2 * (lat + inst.layers[e - 1].output_bytes / bw)
    return total


def _joined_fill(inst, stages, s) -> float:
    """The fill of the prefix ``stages[:s]`` with the traversal of its boundary to the
    stage after it (the walk reads it so at a state whose first stage is ``stages[s]``)."""
    bw, lat = _path(inst, stages[s - 1][2], stages[s][2])
    return _prefix_fill(inst, stages[:s]) + 2 * (
        lat + inst.layers[stages[s][0] - 1].output_bytes / bw)


def _period(inst, stages) -> float | None:
    """The period of a placement with the instance's ``M`` (``None``: memory breaks)."""
    got = contract_pipeline(inst, inst.microbatches, stages)
    if got is None:
        return None
    T_p = got[0]
    fill = _prefix_fill(inst, stages)
    return (T_p - fill) / (inst.microbatches - 1)


@pytest.mark.parametrize("seed", range(48))
def test_the_curve_never_exceeds_a_real_prefix(seed):
    """For every placement, every split into prefix and suffix and every cap of the grid at
    or above the placement's period: the walk's fill at the suffix's state is at most the
    prefix's own fill with the traversal of the boundary to the suffix (it fails when
    that traversal is counted twice); and
    :meth:`least_time` is at most the placement's ``T_p``."""
    inst = random_v3_instance(seed)
    tables = CostTables(inst)
    M, L = inst.microbatches, inst.num_layers
    if M < 2 or inst.training.objective != "period":
        pytest.skip("no period to cap")
    windows = inst.training.schedule == "1f1b" and M > L
    plans = []
    for stages in _v3_configurations(inst):
        lam = _period(inst, stages)
        if lam is not None:
            plans.append((stages, lam, contract_pipeline(inst, M, stages)[0]))
    if not plans:
        pytest.skip("no placement fits")
    curve = PrefixCurve.of(tables, 0, tables.K - 1, False, windows)
    top = max(lam for _, lam, _ in plans) * 1.5
    grid = curve.grid(top)
    assert len(grid) and grid[-1] >= top
    checked = 0
    for stages, lam, T_p in plans:
        assert curve.least_time(M, top, tables.K - 1) <= T_p * (1 + 1e-9) + 1e-12
        for s in range(1, len(stages)):
            k0 = stages[s][2]
            groups = np.flatnonzero(tables.group_dc == k0)
            usage = [0] * len(groups)
            for _a, _e, k, g, d, t in stages[s:]:
                if k == k0:
                    usage[g] += d * t
            v = curve.room(k0, tuple(usage))
            fill = _joined_fill(inst, stages, s)
            for cap in grid[grid >= lam * (1 + 1e-12)]:
                got = curve.walk(cap)[stages[s][0], k0, v]
                assert got <= fill * (1 + 1e-9) + 1e-12, (stages, s, cap, got, fill)
                checked += 1
    # a cap under which the relaxed walk places nothing is below every placement's period
    least = min(lam for _, lam, _ in plans)
    for cap in grid:
        if not curve.fits(float(cap)):
            assert cap < least * (1 + 1e-9)
    assert checked or all(len(st) == 1 for st, _, _ in plans)


@pytest.mark.parametrize("seed", range(32))
def test_a_range_least_cap_from_the_walks_of_its_first_dc(seed):
    """Ranges asked from the longest down (odd seeds: the shortest up), each starting from
    the bracket the walks of its first DC show (:meth:`PrefixCurve._bracket`): each least
    cap is one a fresh curve of the range (no walks shown) finds not to fit, with a fit
    within the bisection's width above it, also where the boundaries bind (``U`` scaled
    up: the bisection's steps are answered by one bottleneck walk,
    :meth:`PrefixCurve._bottleneck_fits`, the fresh curve's by the forward walk); from the
    longest down, the shared walks are no more than the fresh ones."""
    from chainpipe.solvers.prefix_curve import COARSE_RTOL

    inst = random_v3_instance(seed)
    shared = CostTables(inst)
    if shared.K < 2:
        pytest.skip("one datacenter")
    big = 1e12
    fresh_walks = 0
    for i in range(shared.K):
        for j in (range(i, shared.K) if seed % 2 else range(shared.K - 1, i - 1, -1)):
            least = PrefixCurve.of(shared, i, j, True, False)
            least.grid(big)
            fresh = PrefixCurve(CostTables(inst), i, j, True, False)
            fresh.grid(big)
            fresh_walks += len(fresh._shown())
            if least.least is None:
                assert fresh.least is None and not fresh.fits(big)
                continue
            assert not fresh.fits(least.least)
            assert fresh.fits(least.least / (1 - COARSE_RTOL) * (1 + 1e-12))
            for factor in (3.0, 30.0):  # boundaries that bind (inside a DC and across)
                scaled = [PrefixCurve(CostTables(inst), i, j, True, False) for _ in "ab"]
                for curve in scaled:
                    curve._local[4] = curve._local[4] * factor
                scaled[0].grid(big)
                if scaled[0].least is None:
                    assert not scaled[1].fits(big)
                else:
                    assert not scaled[1].fits(scaled[0].least)
                    assert scaled[1].fits(scaled[0].least / (1 - COARSE_RTOL) * (1 + 1e-12))
    if seed % 2 == 0:  # (the longest first: every shorter range has both ends bracketed)
        shown = sum(len(v) for v in shared.__dict__["_prefix_shown"].values())
        assert shown <= fresh_walks


@pytest.mark.parametrize("seed", range(24))
def test_a_windowed_least_cap_is_the_forward_walks_own(seed):
    """With the windows capped the bottleneck walk answers a step of the least cap's
    bisection first (a misfit without the windows is one with them): the least cap and
    what the walks show are those of a forward walk at every step, also where the
    boundaries bind (``U`` scaled up)."""
    inst = random_v3_instance(seed)
    K, big = CostTables(inst).K, 1e12
    for i, j, fixed, factor in ((0, K - 1, False, 1.0), (K - 1, K - 1, True, 1.0),
                                (0, K - 1, True, 30.0)):
        new, old = (PrefixCurve(CostTables(inst), i, j, fixed, True) for _ in "ab")
        for curve in (new, old):
            curve._local[4] = curve._local[4] * factor
        old._bottleneck_fits = lambda: (lambda lam: True)  # a forward walk at every step
        new.grid(big)
        old.grid(big)
        assert new.least == old.least, (i, j, fixed, factor)
        assert new._shown() == old._shown()


@pytest.mark.parametrize("seed", range(6))
def test_the_pruned_walk_equals_the_full_one(seed):
    """The walk that skips the usages a lower usage matches (``prune``) gives the same
    tables, read at the least over lower usages, as the walk expanding every one, on
    generated instances of several GPU types per DC (windows capped and not). It fails
    when an entry merely close to a lower usage's fill is dropped."""
    from chainpipe.instances.generator import generate

    inst = generate("hybrid", seed, version=3)
    tables = CostTables(inst)
    for first, windows in ((0, True), (1, False)):
        curve = PrefixCurve(tables, first, tables.K - 1, first == 1, windows)
        lam = curve._layer_floor()
        for step in (1.5, 3.0, 6.0, 12.0, 24.0):  # the model fits from 12 on
            full = curve.tables_at(lam * step, prune=False)
            np.testing.assert_array_equal(curve.tables_at(lam * step), full)


@pytest.mark.parametrize("seed", range(40))
def test_a_curve_at_theta_never_exceeds_a_real_prefix_below_it(seed):
    """The curve of a range's searches at a limit ``theta`` of ``max R`` (its walks leave
    out the options with ``R >= theta``, :meth:`PrefixCurve._allowed`): for every placement
    and ``theta`` a hair above its own ``max R``, the curve's :meth:`least_time` is at most
    the placement's ``T_p`` and every walk's fill at a suffix's state at most the prefix's
    own fill. It fails when the walks leave out options a millionth below ``theta``."""
    inst = random_v3_instance(seed)
    M = inst.microbatches
    if M < 2 or inst.training.objective != "period":
        pytest.skip("no period to cap")
    plans = []
    for stages in _v3_configurations(inst):
        lam, got = _period(inst, stages), contract_pipeline(inst, M, stages)
        if lam is not None and got[1] > 0:  # (a limit below R = 0 leaves nothing)
            plans.append((stages, lam, got[0], got[1]))
    if not plans:
        pytest.skip("no placement with a synchronisation fits")
    tables = CostTables(inst)
    windows = inst.training.schedule == "1f1b" and M > inst.num_layers
    checked = 0
    for stages, lam, T_p, R in plans[:: max(1, len(plans) // 12)]:
        theta = float(np.nextafter(R, np.inf))
        curve = PrefixCurve(tables, 0, tables.K - 1, False, windows, theta)
        top = lam * 1.5
        assert curve.least_time(M, top, tables.K - 1) <= T_p * (1 + 1e-9) + 1e-12
        grid = curve.grid(top)
        for s in range(1, len(stages)):
            k0 = stages[s][2]
            usage = [0] * int((tables.group_dc == k0).sum())
            for _a, _e, k, g, d, t in stages[s:]:
                if k == k0:
                    usage[g] += d * t
            fill = _joined_fill(inst, stages, s)
            for cap in grid[grid >= lam * (1 + 1e-12)]:
                got = curve.walk(cap)[stages[s][0], k0, curve.room(k0, tuple(usage))]
                assert got <= fill * (1 + 1e-9) + 1e-12, (stages, s, cap, got, fill)
                checked += 1
    assert checked or all(len(p[0]) == 1 for p in plans)


@pytest.mark.parametrize("seed", range(24))
def test_a_state_floor_pays_the_traversal_to_its_first_stage(seed):
    """The table the search reads (:meth:`PrefixCurve.walk`) is the walk's least fill plus
    the traversal of the prefix's boundary to the state's DC: never less than the plain
    table (:meth:`PrefixCurve.tables_at`) plus the least such traversal, and the same at
    the whole model's end (no stage after it). It fails when the traversal is left out."""
    inst = random_v3_instance(seed)
    tables = CostTables(inst)
    if inst.microbatches < 2 or tables.L < 2:
        pytest.skip("no period to cap")
    curve = PrefixCurve.of(tables, 0, tables.K - 1, False, False)
    grid = curve.grid(1e9)
    Q = curve._local[5]
    raised = 0
    for cap in grid[:4]:
        joined, plain = curve.walk(float(cap)), curve.tables_at(float(cap))
        np.testing.assert_array_equal(joined[-1], plain[-1])
        for k in range(tables.K):
            least_q = Q[1:-1, :k + 1, k].min(axis=1)[:, None]
            here, base = joined[1:-1, k], plain[1:-1, k]
            ok = np.isfinite(here)
            assert (here[ok] >= (base + least_q)[ok] * (1 - 1e-12)).all()
            raised += int((here[ok] > base[ok]).sum())
    assert raised


def _at_most_arrays(F, radix, join=None):
    """``prefix_curve._at_most`` as array operations (what the compiled kernel replaced):
    the least over lower usages by ``np.minimum.accumulate`` along each group's axis."""
    L1, K, nV = F.shape
    out = np.empty_like(F)
    least = F.min(axis=2)
    if join is not None:
        U, Q, lam = join
        reach = U[:, :K, :K] <= lam * (1 + 1e-9)
        Qk = Q[:, :K, :K]
    before = np.full(L1, np.inf)
    for k in range(K):
        dims = [int(r) for r in radix[k] if r > 1][::-1] or [1]
        n = int(np.prod(dims))
        part = F[:, k, :n].reshape([L1] + dims)
        for ax in range(1, len(dims) + 1):
            part = np.minimum.accumulate(part, axis=ax)
        part = part.reshape(L1, n)
        if join is None:
            here = np.minimum(part, before[:, None])
            before = np.minimum(before, least[:, k])
        else:
            come = np.where(reach[:, :k, k], least[:, :k] + Qk[:, :k, k], np.inf)
            pre = come.min(axis=1) if k else np.full(L1, np.inf)
            own = np.where(reach[:, k, k], Qk[:, k, k], np.inf)
            here = np.minimum(part + own[:, None], pre[:, None])
        out[:, k, :n] = here
        out[:, k, n:] = np.inf
    return out


@pytest.mark.parametrize("seed", range(8))
def test_the_compiled_least_over_lower_usages_is_the_array_one(seed):
    """``_at_most`` (compiled) equals the array operations it replaced, on random tables
    of mixed radices (groups of one option count, of none, padding), with and without the
    join's traversals and occupancies. It fails when a group's digit is read at another
    stride or a DC before is left out."""
    from chainpipe.solvers.prefix_curve import _at_most

    rng = np.random.default_rng(seed)
    L1, K, G = 9, 4, 3
    radix = rng.integers(1, 4, (K, G)).astype(np.int64)
    nV = int(np.prod(radix, axis=1).max()) + 2
    F = np.where(rng.random((L1, K, nV)) < 0.3, np.inf, rng.uniform(0, 10, (L1, K, nV)))
    U, Q = rng.uniform(0, 2, (L1, K + 1, K + 1)), rng.uniform(0, 1, (L1, K + 1, K + 1))
    U[-1], Q[-1] = 0.0, 0.0
    np.testing.assert_array_equal(_at_most(F, radix), _at_most_arrays(F, radix))
    for lam in (0.5, 1.0, 3.0):
        np.testing.assert_array_equal(_at_most(F, radix, (U, Q, lam)),
                                      _at_most_arrays(F, radix, (U, Q, lam)))


@pytest.mark.parametrize("seed", range(30))
def test_options_outdone_on_their_range_leave_every_walk_the_same(seed, monkeypatch):
    """Without a limit ``theta`` the walks skip an option on a layer range where another
    with no more devices and no larger ``C`` fits (``prefix_curve._outdone``): the tables
    the searches and floors read (joined, per usage at most) are those of walks over every
    option, with and without the windows' buckets; with a limit every option is walked
    (it fails when the skip is made under a limit too: the faster option's ``R`` may be
    barred)."""
    from chainpipe.solvers import prefix_curve

    inst = random_v3_instance(seed)
    if inst.microbatches < 2:
        pytest.skip("no period to cap")
    probe = CostTables(inst)
    syncs = sorted({float(x) for g in range(probe.G) for x in np.ravel(
        probe.options(g).sync_time) if np.isfinite(x) and x > 0})
    thetas = [np.inf] + [float(np.nextafter(x, np.inf)) for x in syncs[:1] + syncs[1::4]][:4]

    def curves():
        tables = CostTables(inst)
        prefix_curve._walked_options(tables)  # made now (the walks come later), kept
        return [PrefixCurve(tables, 0, tables.K - 1, False, w, th)
                for th in thetas for w in (False, True)]

    skipping = curves()
    monkeypatch.setattr(prefix_curve, "_outdone",
                        lambda opts, least: np.zeros(opts.compute_time.shape, bool))
    every = curves()
    for a, b in zip(skipping, every):
        for cap in b.grid(1e9)[:3]:
            np.testing.assert_array_equal(a.tables_at(float(cap), joined=True),
                                          b.tables_at(float(cap), joined=True))


def test_the_walks_skip_outdone_options():
    """On ``v3-medium-01`` most of a group's option cells are outdone on their range (the
    walks' work the skip saves), and the walks without a limit leave them out."""
    from pathlib import Path

    import chainpipe as cp
    from chainpipe.solvers.prefix_curve import _outdone, _walked_options

    tables = CostTables(cp.read(Path(__file__).resolve().parents[1] / "instances" / "v3"
                                / "medium" / "v3-medium-01.json"))
    out = _outdone(tables.options(0), 1)
    assert out.sum() > 0.3 * np.isfinite(tables.options(0).compute_time).sum()
    assert not (_walked_options(tables)[0][0, :out.shape[0]] & out).any()
