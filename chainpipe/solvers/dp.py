"""The exact chain dynamic program (solver ``dp``): chainpipe's reference optimum.

The search walks the layers backwards, from ``L`` down to ``0``. A *state* is
``(b, k, u)``: the layers ``[b, L)`` are placed, the first of their stages runs
in datacenter ``k``, and ``u`` counts the devices of each group of ``k`` already
used (``d * t`` per stage). Each state keeps the Pareto frontier of labels
``(bottleneck max(C_s, U_s), sum(C_s + Q_s), stages placed p, sync max R_s)``
(``p`` capped where 1F1B memory stops depending on it); the optimum is the best
``sum + (M - 1) * max + sync`` over the frontiers at ``b = 0``. Since ``T`` is
increasing in every criterion and each criterion of an extended plan depends
only on the label and the new stage, a dominated partial plan never completes
into a better plan than its dominator (``docs/dp.md`` proves it). A stage
option is a layer range on a group with a pair ``(d, t)``; options of one
range and group dominated by another pair (no more devices, no larger ``C`` or
``R``, no smaller in-flight limit) are dropped first.

The work per label (the filters, the bound per label, the extension) is compiled
(:mod:`.label_kernel`, numba; loaded by :func:`.label_aot.load` from the module
compiled ahead of time when it is built, which a fresh process loads without numba);
this module enumerates states and stage options and back-tracks. With ``threads > 1`` the trials below run side by side
(:mod:`.dp_parallel`).

Bounding makes it fast: a trial upper bound ``U`` on the optimum restricts
stages to those with ``C <= (U - sum lower bound) / (M - 1)``, boundaries the
same way, and prunes labels whose optimistic completion reaches ``U``. If no
plan beats ``U``, the optimum is at least ``U`` (a proven lower bound) and the
search repeats with a larger trial. The first trial that succeeds is exact.
"""

from __future__ import annotations

import math
import time

import numpy as np

from .. import cost
from ..deadline import Deadline, TimeUp
from ..plan import Plan
from ..result import OptionError, Outcome, number_option
from ..support import features
from ..tables import CostTables, dominated_options, fill_bound, fill_curve
from .labels import (
    DP_TRIALS,
    HYBRID_TRIALS,
)


def _forks() -> bool:
    """Whether trials can run in forked processes (:mod:`.dp_parallel`, imported only
    then: ``multiprocessing`` costs a fresh process about 10 ms)."""
    from . import dp_parallel

    return dp_parallel.available()


def run(instance, *, deadline=None, seed=0, threads=1, log=None, upper_bound=None,
        scheduler=None, **options) -> Outcome:
    """Solve ``instance`` to proven optimality (or report what was proven by the limit).

    ``log``, if given, is called with one line per trial bound. ``threads > 1`` runs the
    trials side by side in forked processes (:mod:`.dp_parallel`); ``scheduler`` (a Dask
    scheduler's address, cluster or client) runs them as tasks of that cluster instead
    (:mod:`.dp_dask`), from the first trial on.
    """
    if options:
        raise OptionError(f"dp: unknown option(s) {', '.join(sorted(options))}")
    if upper_bound is not None:
        upper_bound = number_option("dp", "upper_bound", upper_bound, strict=True)
    deadline = Deadline.of(deadline)
    if scheduler is None:
        return solve_checked(instance, deadline, threads, log, upper_bound)
    from . import dp_dask

    dp_dask.check(scheduler)
    try:
        return solve_checked(instance, deadline, threads, log, upper_bound, scheduler)
    except dp_dask.Unreachable as exc:
        return Outcome("error", lower_bound=None, message=str(exc))


def solve_checked(instance, deadline: Deadline, threads=1, log=None, upper_bound=None,
           scheduler=None) -> Outcome:
    """:func:`run` with its options checked (version 3 goes to :mod:`.dp_pipelines`,
    which calls this for its version-2 searches)."""
    if features(instance.training):  # version 3: the period objective, several pipelines
        if upper_bound is not None:
            raise OptionError("dp: upper_bound is not supported under contract version 3 yet")
        from .dp_pipelines import solve as solve_v3

        return solve_v3(instance, deadline, log, threads, scheduler)
    tables = CostTables(instance)
    reason = tables.infeasibility_reason()
    if reason:
        return Outcome("infeasible", message=reason, lower_bound=None)
    try:
        lb, capacity = _first_bound(tables, deadline)
    except TimeUp:
        return Outcome("no_solution", lower_bound=None,
                       message="time limit reached while the search was being prepared")
    if capacity is not None and not np.isfinite(lb):  # so no datacenter alone holds it
        return Outcome("infeasible", lower_bound=None, message=(
            "the devices cannot hold the model: no set of stages that fit memory covers "
            "its FLOP, whatever the bottleneck"))
    proven = lb  # the optimum is at least this
    stats = {"trials": []}
    steps = DP_TRIALS if tables.single_device else HYBRID_TRIALS
    # the last step is unbounded; a zero lower bound (a model of no FLOP) makes every
    # finite step the same trial, and 0 * inf no trial at all: one of each, then inf
    trials = sorted({lb * (1 + d) if math.isfinite(d) else math.inf for d in steps})
    if upper_bound is not None:
        trials = [u for u in trials if u < upper_bound] + [upper_bound * (1 + 1e-9)]
    try:
        dominated = _dominance(tables, deadline)  # computed once for every trial
        remote = None if scheduler is None else _on_cluster(instance, deadline, scheduler)
        check = _FeasibilityCheck(tables, deadline, dominated, stats)
        found, failed = _walk(lambda trial: _Search(tables, trial, deadline, capacity, dominated),
                              trials, deadline, threads, stats, log, remote, check)
    except TimeUp:
        failed = [t["upper_bound"] for t in stats["trials"] if t.get("found") is False]
        return Outcome("no_solution", lower_bound=max([proven] + failed),
                       message="time limit reached before a plan was proven optimal",
                       stats=stats)
    if found is not None:
        T, stages = found
        stats["labels"] = sum(t["labels"] for t in stats["trials"])
        stats["objective_s"] = T  # the search's own T of its plan (tests: equals evaluate)
        return Outcome("optimal", plan=Plan.from_tuples(instance, stages), lower_bound=None,
                       stats=stats)
    proven = max([proven] + failed)
    if upper_bound is not None:  # only plans below the caller's bound were searched
        return Outcome("no_solution", lower_bound=min(proven, float(upper_bound)), stats=stats,
                       message=f"no plan with T below the upper bound {upper_bound:.6g} s")
    return Outcome("infeasible", lower_bound=None, stats=stats,
                   message="no plan satisfies the memory limits and device counts")


def trial_setup(instance, deadline: Deadline) -> tuple:
    """What every trial search of ``instance`` shares: ``(tables, capacity, dominance)``
    (what a Dask worker builds once per instance, :mod:`.dp_dask`)."""
    tables = CostTables(instance)
    _, capacity = _first_bound(tables, deadline)
    return tables, capacity, _dominance(tables, deadline)


def trial_search(setup: tuple, trial: float, deadline: Deadline) -> _Search:
    """The search of one trial bound, from :func:`trial_setup`'s ``setup``."""
    tables, capacity, dominated = setup
    return _Search(tables, trial, deadline, capacity, dominated)


def _on_cluster(instance, deadline: Deadline, scheduler):
    """``remote(trials, ended, check)`` of :func:`_walk`: the trials as tasks of a cluster."""
    from . import dp_dask

    def remote(trials, ended, check=None):
        return dp_dask.run_trials(instance, trials, deadline, scheduler, ended, check)

    return remote


def _walk(make_search, trials, deadline: Deadline, threads: int, stats: dict, log,
          remote=None, check=None):
    """Search the trial bounds, lowest first: in this process, ``threads`` at a time
    in forked processes (:mod:`.dp_parallel`), or every one by ``remote(trials, ended, check)``
    (a cluster, :mod:`.dp_dask`). Returns the first plan found ``(T, stages)`` (or
    ``None``) and the bounds proven by failed trials; each trial's counters go to
    ``stats["trials"]`` (with ``found``) and a line to ``log``. Raises :class:`TimeUp`
    when the deadline passes first.

    ``check`` (a :class:`_FeasibilityCheck`) is asked once the failed trials have taken
    :data:`FEASIBILITY_AFTER_S` of CPU (in this process between trials), or beside the
    forked ones or the cluster's tasks: when it proves that no plan exists, every trial
    left is proven too."""
    failed: list[float] = []

    def ended(trial, found, counters):
        stats["trials"].append({"upper_bound": trial, "found": found is not None, **counters})
        if found is None:
            failed.append(trial)
        if log is not None:
            log(f"dp: trial T < {trial:.6g} s: {'plan found' if found else 'no plan, bound proven'}"
                f" ({counters['labels']} labels, {deadline.elapsed():.2f} s)")

    if remote is not None and trials:
        stats["cluster"] = True
        try:
            found, _ = remote(trials, ended, check)
        except TimeUp:
            if log is not None:
                log("dp: trials stopped by the time limit")
            raise
        if found is None and check is not None and check.none:
            failed.extend(trials)  # no plan at all: below no bound either
        return found, failed
    for n, trial in enumerate(trials):
        if (threads > 1 and len(trials) - n > 1 and deadline.elapsed() > PARALLEL_AFTER_S
                and _forks()):
            # a large instance (its set-up or a trial took a while): the trials left side
            # by side in forked processes, the kernels loaded here first
            from .label_aot import load

            load().warm()
            stats["processes"] = threads
            try:
                from . import dp_parallel

                found, _ = dp_parallel.run_trials(make_search, trials[n:], deadline, threads,
                                                  ended, check)
            except TimeUp:
                if log is not None:
                    log("dp: trials stopped by the time limit")
                raise
            if found is None and check is not None and check.none:
                failed.extend(trials[n:])  # no plan at all: below no bound either
            return found, failed
        search = make_search(trial)
        try:
            found = search.run()
        except TimeUp:
            stats["trials"].append({"upper_bound": trial, "timed_out": True, **search.stats})
            if log is not None:
                log(f"dp: trial T < {trial:.6g} s stopped by the time limit")
            raise
        ended(trial, found, search.stats)
        if found is not None:
            return found, failed
        spent = sum(t.get("cpu_s", 0.0) for t in stats["trials"])
        if check is not None and spent > FEASIBILITY_AFTER_S and check():
            failed.extend(trials[n + 1:])  # no plan at all: below no bound either
            return None, failed
    return None, failed


#: with ``threads > 1``, the trials left go to forked processes once the run has taken
#: this long (measured: the set-up of a 256-GPU instance takes 0.5 s, of a 64-GPU one
#: 0.02 s; a child costs tens of milliseconds, not worth it on small instances)
PARALLEL_AFTER_S = 0.25


#: blocks of a search's image arena at its start (:func:`.label_kernel.new_arena`; 256
#: images each)
ARENA_BLOCKS = 4096


#: the feasibility check (:class:`_FeasibilityCheck`) runs once the failed trials have
#: taken this many CPU seconds: it costs 0.1 to 0.5 s on 256 to 1,536 GPUs, which an
#: instance whose trials end sooner should not pay (measured: 0.15 s of the 2.6 s of
#: hybrid-large seed 1), and it saves every trial of an instance with no plan
FEASIBILITY_AFTER_S = 3.0


class _FeasibilityCheck:
    """Called with no argument: ``True`` when it proves that the instance has no plan
    (:func:`feasible`; asked once, later calls say ``False``). Its CPU time and answer
    go to ``stats["feasibility"]``."""

    def __init__(self, tables: CostTables, deadline: Deadline, dominated: dict, stats: dict):
        self.args = (tables, deadline, dominated)
        self.stats = stats
        #: whether it proved that no plan exists
        self.none = False

    def __call__(self) -> bool:
        if "feasibility" in self.stats:
            return False
        start = time.process_time()
        ok = feasible(*self.args)
        self.stats["feasibility"] = {"feasible": ok, "cpu_s": time.process_time() - start}
        self.none = not ok
        return self.none


def _dominance(tables: CostTables, deadline: Deadline) -> dict:
    """Per group's options (by ``id``): which are dominated among those that fit memory
    at the last position at all (:func:`~chainpipe.tables.dominated_options`). An
    option's dominator is no worse in ``C``, ``N`` and ``R``, so it passes every test of
    a trial the option passes: the dominance holds under every trial's cap."""
    need = tables.in_flight(1)
    out: dict = {}
    for g in range(tables.G):
        opts = tables.options(g)
        if id(opts) in out or not len(opts.d):
            continue
        deadline.check()
        C, N = opts.compute_time, opts.max_in_flight
        out[id(opts)] = dominated_options(np.isfinite(C) & (N >= need), C, N, opts.sync_time,
                                          opts.width, deadline.check)
    return out


def _first_bound(tables: CostTables, deadline: Deadline):
    """The lower bound the trials start from and the :class:`LayerCapacity` they share
    (``None`` in version 1 or for one microbatch); ``inf`` when the devices cannot hold
    the model under any bottleneck. Raises :class:`TimeUp` when the deadline passes.

    In version 1 the capacity's floor lifts the bound (GPT-3 175B at L = 194: 11.47 to
    11.82 s, so that its trial at four times the bound finds the optimum, 46.12 s, and
    the unbounded trial is not needed), but the trials do not use it: its per-prefix
    bounds were measured to cut 1 % of the labels there and to cost more than that."""
    if tables.M == 1 or not LayerCapacity.affordable(tables):
        return tables.lower_bound, None
    # what the free devices can hold under a bottleneck (see LayerCapacity): built
    # once, used by every trial, and a floor under the bottleneck of the lower bound
    capacity = LayerCapacity(tables, usage_caps(tables), deadline.check)
    shared = None if tables.single_device else capacity  # version 1: the bound only
    total = float(tables.flop_prefix[-1])
    across = float(capacity.needed(capacity.curve(list(range(tables.G)), []), total))
    if not np.isfinite(across):
        return math.inf, shared
    alone = []
    for k in range(tables.K):
        deadline.check()
        alone.append(float(capacity.needed(capacity.curve(
            [g for g in np.flatnonzero(tables.group_dc == k).tolist()], []), total)))
    if shared is not None and ChainCapacity.useful(tables):
        # stages by position along the chain: a floor for every plan, alone or across
        chain = shared.chain = ChainCapacity(tables, capacity.count, deadline.check)
        floor = chain.floored(across, total)
        alone = [max(b, floor) for b in alone]
        across = max(across, floor)
    return max(tables.lower_bound, tables.bound_with_floors(alone, across)), shared


class _Search:
    """One bounded run of the DP: finds the optimum if it is below ``upper``."""

    def __init__(self, tables: CostTables, upper: float, deadline: Deadline,
                 capacity: LayerCapacity | None, dominated: dict):
        self.t = tables
        self.upper = upper
        self.deadline = deadline
        self.capacity = capacity
        #: per group's options: which are dominated (:func:`_dominance`, shared by the
        #: trials of a run)
        self.dominated = dominated
        self.stats = {"labels": 0, "states": 0, "candidate_stages": 0}
        #: moves into an earlier datacenter once per datacenter, from the front of its
        #: states' labels (:meth:`_crossings`); per state in :class:`_Feasible`
        self.merge_crossings = True
        self.chain = None  # the floors by position, set by _prepare_bounds

    def run(self):
        """The best complete plan below ``upper`` as ``(T, stages)``, or ``None``; the CPU
        seconds it took in ``stats["cpu_s"]``."""
        start = time.process_time()
        try:
            return self._run()
        finally:
            self.stats["cpu_s"] = time.process_time() - start

    def _run(self):
        t = self.t
        self.sum_lb = self._sum_lower_bound()
        self.cap = np.inf if t.M == 1 else (self.upper - self.sum_lb) / (t.M - 1)
        if t.M > 1 and np.isfinite(self.cap):
            # a plan below upper has every C_s <= cap, so its fill is at least the fill bound
            # at cap, which shrinks the cap in turn (each step is a valid bound: 3 suffice)
            everything = (t.rate * t.count).tolist()
            for _ in range(3):
                curve_x, _ = fill_curve(everything, self.cap)
                self.sum_lb = max(self.sum_lb, fill_bound(float(t.flop_prefix[-1]),
                                                           curve_x.tolist(), self.cap))
                self.cap = (self.upper - self.sum_lb) / (t.M - 1)
        self.cands, t_max = self._candidate_stages()
        # 1F1B memory depends on a stage's position only up to t_max + 1, and a plan has at
        # most L stages: the cap keeps every structure independent of M
        self.p_cap = 0 if t.schedule == "gpipe" else min(t.M, t_max + 1, t.L)
        states, best = self._label_loop()
        return None if best is None else (best[0], self._backtrack(states, best[1]))

    def _sum_lower_bound(self) -> float:
        """``sum_s C_s`` of any plan is at least the total FLOP on the widest stage of the
        fastest devices (tensor-parallel all-reduces only add)."""
        return cost.compute_time(self.t.flop_prefix[-1], self.t.rate.max(), self.t.widest)

    def _candidate_stages(self):
        """Per group and end ``b``: the stage options ``[a, b)`` worth trying, as arrays
        ``(a, C, R, devices)`` and rows ``(a, C, max in flight, devices, R, pair)``
        (``None`` when there is none).

        An option is kept when ``C <= cap``, its synchronisation leaves room below the
        trial bound, memory fits at some position, and no other pair of the same group
        and range dominates it. Also returns the largest in-flight limit below ``M``,
        where 1F1B positions stop mattering.
        """
        t, L, M = self.t, self.t.L, self.t.M
        need = t.in_flight(1)  # the least a stage stashes (the last stage's count)
        limit = self.cap * (1 + 1e-12)
        sync_limit = (self.upper - self.sum_lb) * (1 + 1e-12)
        cands: list[list] = []
        #: per group: its distinct widths (the slots of the capacity floors' rows)
        self.widths_of: list = [[] for _ in range(t.G)]
        t_max = ncand = 0
        shared: dict = {}  # groups with the same options share their candidates
        shared_group: dict = {}
        for g in range(t.G):
            self.deadline.check()
            opts = t.options(g)
            if id(opts) in shared:
                cands.append(shared[id(opts)])
                self.widths_of[g] = self.widths_of[shared_group[id(opts)]]
                continue
            shared_group[id(opts)] = g
            per_end: list = [None] * (L + 1)
            cands.append(per_end)
            shared[id(opts)] = per_end
            if not len(opts.d):
                continue
            C, N, R, W = opts.compute_time, opts.max_in_flight, opts.sync_time, opts.width
            ok = (C <= limit) & (N >= need) & (R <= sync_limit) & ~self.dominated[id(opts)]
            cs, starts, ends = np.nonzero(ok)
            order = np.lexsort((-starts, cs, ends))  # by end, then pair, then start descending
            cs, starts, ends = cs[order], starts[order], ends[order]
            n_all = N[cs, starts, ends]
            below = n_all[n_all < M]
            if len(below):
                t_max = max(t_max, int(below.max()))
            c_all, r_all = C[cs, starts, ends], R[cs, starts, ends]
            w_all = W[cs]
            widths = distinct(W)
            self.widths_of[g] = widths.tolist()
            table = np.column_stack((starts, c_all, n_all, w_all, r_all, cs,
                                     np.searchsorted(widths, w_all))).astype(np.float64)
            cuts = np.searchsorted(ends, np.arange(L + 2))
            for b in range(1, L + 1):
                if cuts[b] < cuts[b + 1]:
                    per_end[b] = table[cuts[b]:cuts[b + 1]]
            ncand += len(cs)
        self.stats["candidate_stages"] = ncand
        return cands, t_max

    def _label_loop(self):
        """Walk the layers backwards: filter each layer's states, then put every stage
        option worth trying before each state's labels (the compiled kernels of
        :mod:`.label_kernel`; the invariants are stated in ``docs/dp.md``), those into an
        earlier datacenter once per datacenter (:meth:`_crossings`).

        Returns the states (for back-tracking) and the best complete plan
        ``(T, parent)``, or ``None`` when no plan beats ``upper``.
        """
        from .label_aot import load

        label_kernel = load()  # compiled ahead of time, else numba's just-in-time kernels

        t = self.t
        L, K = t.L, t.K
        self._prepare_bounds()
        sync = not t.single_device
        steady = t.M - 1
        # the search's constants as advance takes them: M - 1, the stage cap, the killers
        # (under data parallelism), the in-flight counts by position
        consts = np.array([steady, self.p_cap, int(sync)] + list(self.need_at), dtype=np.int64)
        self.live = self.upper  # lowered by every complete plan found
        # the images filed per layer (label_kernel.extend's arena); metas[meta] =
        # (b, key, g) of the extension that made them
        # room for a million images from the start: untouched pages cost nothing, and
        # growing copies what is filed (hybrid-large seed 1: 9 copies, 0.1 s)
        self.arena = label_kernel.new_arena(L, blocks=ARENA_BLOCKS)
        self.metas = []
        # state keys by id (the images' ``state``), with their usage and datacenter
        self.key_ids, self.key_list = {}, []
        self.usage_all = np.zeros((64, max(map(len, self.groups_of))), dtype=np.int64)
        self.dc_all = np.zeros(64, dtype=np.int64)
        first = self._key_id((K, ()))  # the empty suffix; sentinel DC K
        label_kernel.seed(L, first, *self.arena)
        states: list = [None] * (L + 1)
        self.best = None  # (T, parent) of the best complete plan
        self.kernel, self.consts = label_kernel, consts
        for b in range(L, 0, -1):
            layer = states[b] = self._filter_layer(b, sync, steady, label_kernel)
            merge = self.merge_crossings
            for key, (X, _parents) in list(layer.items()):
                self.deadline.check()
                placed = self._placed(X)
                for move in self._moves(b, key):
                    if not merge or move[1] == key[0] or key[0] == K:
                        self._advance(b, key, X, move, placed)
            if merge:
                for key, X, moves in self._crossings(b, layer, sync, steady):
                    self.deadline.check()
                    placed = self._placed(X)
                    for move in moves:
                        self._advance(b, key, X, move, placed)
        return states, self.best

    def _placed(self, X) -> int:
        """The fewest stages placed of the labels ``X`` (what the chain floors of their
        prefixes read, :class:`ChainCapacity`; counted up to where positions stop
        mattering to them), -1 when the search has none."""
        return -1 if self.chain is None else min(int(X[:, 2].min()), self.chain_placed)

    def _advance(self, b: int, key, X, move, placed: int = -1) -> None:
        """One move before the labels ``X`` of state ``key`` at layer ``b``, the fewest
        stages placed of which is ``placed``: :func:`.label_kernel.advance` (the arena
        grown when it lacks room), the extension recorded in :attr:`metas`, a complete
        plan found kept in :attr:`best`."""
        g, k0, gl, u, U, Q = move
        table = self.cands[g][b]
        if table is None:
            return
        bounds = self._prefix_bounds(k0, u, gl, g, placed)
        arena = self.arena
        while True:
            live, pair, lab, short = self.kernel.advance(X, table, *bounds, U, Q, self.live,
                                                         len(self.metas), self.consts, *arena)
            if not short:
                break
            arena = self.arena = self.kernel.grown(arena, short)
        self.metas.append((b, key, g))
        if pair >= 0:
            self.live = live
            self.best = (live, (b, key, lab, 0, g, pair))

    def _crossings(self, b: int, layer: dict, sync: bool, steady: int):
        """The moves into an earlier datacenter from the states of layer ``b``, once per
        datacenter ``k``: such a stage starts on fresh devices and every completion
        after it lies on the datacenters before ``k``, so neither depends on the state's
        devices in use, and the labels of ``k``'s states that another of them dominates
        need not move (``docs/dp.md``, "The compiled kernel"). Yields ``(key, X, moves)``:
        a key that indexes the labels ``X`` in ``layer`` (a state's own, or
        ``("union", k)`` for the front of several, added to ``layer`` with their
        parents) and the moves."""
        by_dc: dict = {}
        for key in layer:
            if key[0] < self.K:
                by_dc.setdefault(key[0], []).append(key)
        for k, keys in by_dc.items():
            moves = [(g, k0, self.local[g], self.unused[k0], U, Q)
                     for k0, U, Q in self._boundaries(b, k) if k0 != k
                     for g in self.groups_of[k0]]
            if not moves:
                continue
            if len(keys) == 1:
                yield keys[0], layer[keys[0]][0], moves
                continue
            rows, kept = self.kernel.union_front(np.vstack([layer[q][0] for q in keys]),
                                                 sync, steady)
            parents = np.vstack([layer[q][1] for q in keys])[kept]
            layer[("union", k)] = (rows, parents)
            yield ("union", k), rows, moves

    def _key_id(self, key) -> int:
        """The id of state ``key`` (the images' ``state``), its usage and DC recorded."""
        got = self.key_ids.get(key)
        if got is None:
            got = self.key_ids[key] = len(self.key_list)
            self.key_list.append(key)
            if got == len(self.dc_all):
                self.usage_all = np.concatenate([self.usage_all, np.zeros_like(self.usage_all)])
                self.dc_all = np.concatenate([self.dc_all, np.zeros_like(self.dc_all)])
            self.usage_all[got, :len(key[1])] = key[1]
            self.dc_all[got] = key[0]
        return got

    def _filter_layer(self, b: int, sync: bool, steady: int, kernel) -> dict:
        """The states of layer ``b`` from the images filed for it (then released): the
        labels :func:`.label_kernel.filter_layer` keeps, per state its rows of ``labels``
        and ``parents`` (``meta``, ``label``, ``pair``: the extension that made the
        label, the label it extended, its stage's pair)."""
        F, I = kernel.take_layer(b, *self.arena)
        if not len(F):
            return {}
        ids, starts, labels, parents = kernel.filter_layer(F, I, self.usage_all, self.dc_all,
                                                           sync, steady)
        bounds = starts.tolist()
        layer: dict = {}
        for s, i in enumerate(ids.tolist()):
            lo, hi = bounds[s], bounds[s + 1]
            if lo < hi:
                layer[self.key_list[i]] = (labels[lo:hi], parents[lo:hi])
        self.stats["labels"] += bounds[-1]
        self.stats["states"] += len(layer)
        return layer

    def _prepare_bounds(self) -> None:
        """What the optimistic completion of a prefix ``[0, a)`` needs, per DC ``k0``
        that holds its last stage (see :meth:`_survivors`)."""
        t = self.t
        K = t.K
        self.K = K
        self.rate_by_dc = [t.rate[t.group_dc <= k].max() for k in range(K)]
        flop = t.flop_prefix.tolist()
        self.flop_arr = np.asarray(flop)
        self.flop_slack = self.flop_arr / HOLD_SLACK
        # per k0 and a: the prefix's compute sum and its largest layer on the widest stage
        # of the fastest devices of DCs <= k0
        prefix_max = t.layer_flop_max
        self.prefix_sum_arr = [cost.compute_time(self.flop_arr, r, t.widest)
                               for r in self.rate_by_dc]
        self.prefix_max_arr = [cost.compute_time(prefix_max, r, t.widest)
                               for r in self.rate_by_dc]
        # in-flight count of a new stage placed before p stages (p capped at p_cap)
        self.need_at = [t.in_flight(p + 1) for p in range(self.p_cap + 1)]
        self.groups_of = [[] for _ in range(K)]
        for g, k in enumerate(t.group_dc.tolist()):
            self.groups_of[k].append(g)
        self.local = [t.groups[g].index for g in range(t.G)]
        # usage never needs to exceed what L stages of the widest option take
        self.count = usage_caps(t)
        # total rate of the devices of DCs before k: bounds the bottleneck of a prefix
        self.capacity_before = _PerDC(
            lambda k: (t.rate[t.group_dc < k] * t.count[t.group_dc < k]).tolist())
        # the fill bound of a prefix (see fill_curve) needs a finite cap
        self.use_fill = np.isfinite(self.cap) and t.M > 1
        self.fill_cap = self.cap if self.use_fill else 0.0
        self.rate_of = t.rate.tolist()
        self.true_count = t.count.tolist()
        self.next_key: dict = {}
        # how many FLOP the devices left can hold under a bottleneck (v2: the widths make
        # the spread of rates a weak bound); per k0, the DCs before it at full count
        if not self.use_fill:
            self.capacity = None
        chain = None if self.capacity is None else self.capacity.chain
        #: the floors by position (:class:`ChainCapacity`), when the run built them, and
        #: the stages placed past which they are the same
        self.chain = chain if chain is not None and len(chain.grid) else None
        self.chain_placed = 0 if self.chain is None else max(0, self.chain.held.shape[1] - 2)
        self.before_groups = _PerDC(lambda k: np.flatnonzero(t.group_dc < k).tolist())
        self.curves: dict = {}
        # a prefix [0, a) that does not stay inside DC k0 crosses a link at some boundary
        # b' <= a between DCs k1 < k2 <= k0: its bottleneck is at least the least such
        # occupancy and its fill gains at least the least such traversal (per k0 and a)
        self.cross_u, self.cross_q = self._crossing_floors()
        self.cap_limit = self.cap * (1 + 1e-12)
        # what each datacenter's devices hold with every C <= cap (for the crossings a
        # prefix needs: it spans at least as many DCs as the fewest that hold it)
        capacity = self.capacity
        self.held_before: dict = {}  # per k0: dc_hold of the DCs before it, an array
        self.dc_hold = None if capacity is None else _PerDC(
            lambda k: capacity.held(capacity.curve(self.groups_of[k], []), self.cap_limit))
        # (k0, usage) -> (rate of the devices free on DCs <= k0, fill curve of the prefix)
        self.free_rate: dict = {}
        # (k0, usage, g) -> the arguments of a move's bounds (_prefix_bounds), and per k0
        # the prefix figures they take
        self.bound_args: dict = {}
        self.prefix_rows: dict = {}
        # (b, k) -> the boundaries a stage before a state of DC k may cross (_boundaries)
        self.reach: dict = {}
        self.unused = [(0,) * len(groups) for groups in self.groups_of]
        self._inf_row = np.full(t.L + 1, np.inf)
        self._no_floors = (np.zeros((1, 1)), np.zeros((1, 1)))

    def _needed_curve(self, k0, u, gl, w):
        """Per prefix end ``a``, once a stage of w devices of local group gl is placed
        on top of usage u: a floor under the prefix's bottleneck (the least under which
        the devices free on DCs <= k0 hold the FLOP of [0, a), and under which those of
        DC k0 hold it unless the prefix crosses a link) and what its fill gains when
        DC k0 cannot hold it under the cap (the crossing). Two arrays; 0 at a = 0."""
        nkey = self.next_key.get((k0, u, gl, w))
        if nkey is None:
            nkey = self.next_key[(k0, u, gl, w)] = (k0, u[:gl] + (u[gl] + w,) + u[gl + 1:])
        got = self.curves.get(nkey)  # it depends on the usage after the stage only
        if got is None:
            capacity, cap_limit = self.capacity, self.cap_limit
            floors = capacity.floors.get(nkey)  # what no trial's cap changes
            if floors is None:
                here = tuple((h, self.true_count[h] - x)
                             for h, x in zip(self.groups_of[k0], nkey[1]))
                if self.chain is None:
                    need, stay, local = capacity.for_prefixes(self.before_groups(k0), here,
                                                              self.flop_arr)
                else:  # the chain floors (_chain_rows) see the DCs before, by position;
                    # the prefix's stages sit at position 2 or later (0-based 1)
                    stay, local = self.chain.prefix_floors(k0, here, 1, self.flop_arr,
                                                           before=False)
                    need = np.zeros(len(stay))
                need = np.maximum(need, np.minimum(stay, self.cross_u[k0]))
                need[0] = 0.0
                floors = capacity.floors[nkey] = (need, stay, local)
            need, stay, local = floors
            # the fewest DCs whose devices hold [0, a) under the cap, less one: links
            # crossed at distinct boundaries; at least one if DC k0 cannot hold it
            before = self.held_before.get(k0)
            if before is None:
                before = self.held_before[k0] = np.array(self.dc_hold.upto(k0), dtype=float)
            here = capacity.held(local, cap_limit) if self.chain is None else \
                self.chain.held_under(local, cap_limit)
            gain = self.kernel.crossing_gain(before, here, self.flop_slack, k0, stay,
                                             cap_limit, self.cross_q[k0])
            got = self.curves[nkey] = (need, gain)
        return got

    def _chain_rows(self, k0, u, gl, g, placed: int) -> np.ndarray:
        """:meth:`_chain_floor` per width of group ``g`` (its slot; ``inf`` rows for
        widths above the free devices, which no row uses), from usage ``u`` of DC ``k0``;
        shared by a run's trials."""
        chain = self.chain
        q = min(placed + 1, chain.held.shape[1] - 1)
        key = (k0, u, g, q)
        got = chain.rows.get(key)
        if got is None:
            free = self.count[g] - u[gl]
            got = chain.rows[key] = np.array([
                self._inf_row if w > free else
                self._chain_floor((k0, u[:gl] + (u[gl] + w,) + u[gl + 1:]), q)
                for w in self.widths_of[g]])
        return got

    def _chain_floor(self, nkey, q: int) -> np.ndarray:
        """Per prefix end ``a``: the chain floor (:class:`ChainCapacity`) under the
        bottleneck of ``[0, a)`` once the state ``nkey`` is reached, the prefix's stages
        at position ``q`` (0-based) or later; shared by a run's trials."""
        chain = self.chain
        key = (nkey, q)
        got = chain.floors.get(key)
        if got is None:
            k0, used = nkey
            free = [(h, self.true_count[h] - x) for h, x in zip(self.groups_of[k0], used)]
            got = chain.floors[key] = chain.prefix_floors(k0, free, key[1], self.flop_arr)[0]
            got[0] = 0.0
        return got

    def _free_curve(self, k0, u):
        """The devices free on DCs <= ``k0`` at usage ``u``: their total rate and the
        breakpoints of the fill curve of a prefix on them, in steps of the cap
        (:func:`~chainpipe.tables.fill_curve`)."""
        got = self.free_rate.get((k0, u))
        if got is None:
            groups_free = self.capacity_before(k0) + [
                (self.true_count[h] - x) * self.rate_of[h]
                for h, x in zip(self.groups_of[k0], u)]
            curve_x, _ = fill_curve(groups_free, self.fill_cap)
            got = self.free_rate[(k0, u)] = (sum(groups_free), curve_x)
        return got

    def _prefix_bounds(self, k0, u, gl, g, placed: int = -1) -> tuple:
        """What :func:`.label_kernel.survivors` needs of a move on group ``g`` of DC
        ``k0`` at usage ``u``, from ``targets`` to ``free``: the optimistic completion of
        the prefix ``[0, a)`` on DCs <= k0 (its sum on the widest stage of the fastest
        devices, its bottleneck at least its largest layer so, its FLOP spread over every
        device still free, held by them, and crossing links when one DC cannot hold it),
        and the state each width leads to. Once per ``(k0, u, g)``."""
        key = (k0, u, g, placed)
        got = self.bound_args.get(key)
        if got is None and placed >= 0:  # with the chain floors of the fewest stages placed
            targets, prefix, curve_x, need, gain, move = self._prefix_bounds(k0, u, gl, g, -1)
            got = self.bound_args[key] = (targets, prefix, curve_x, np.maximum(
                need, self._chain_rows(k0, u, gl, g, placed)), gain, move)
        elif got is None:
            base, curve_x = self._free_curve(k0, u)
            free = self.count[g] - u[gl]
            need, gain, targets = self._per_width(k0, u, gl, g, free)
            prefix = self.prefix_rows.get(k0)
            if prefix is None:
                prefix = self.prefix_rows[k0] = np.vstack(
                    (self.prefix_max_arr[k0], self.prefix_sum_arr[k0], self.flop_arr))
            move = np.array([self.fill_cap, bool(self.use_fill), base, self.rate_of[g],
                             self.capacity is not None, free], dtype=np.float64)
            got = self.bound_args[key] = (targets, prefix, curve_x, need, gain, move)
        return got

    def _per_width(self, k0, u, gl, g, free):
        """Per width of group ``g`` (its slot): the capacity floors of
        :meth:`_needed_curve` (two arrays ``(widths, L + 1)``; ``inf`` rows for widths
        above ``free``, which no row uses) and the id of the state a stage of that width
        leads to."""
        need, gain, targets = [], [], []
        for w in self.widths_of[g]:
            if w > free:
                need.append(self._inf_row)
                gain.append(self._inf_row)
                targets.append(-1)
                continue
            nkey = self.next_key.get((k0, u, gl, w))
            if nkey is None:
                nkey = self.next_key[(k0, u, gl, w)] = (k0, u[:gl] + (u[gl] + w,) + u[gl + 1:])
            targets.append(self._key_id(nkey))
            if self.capacity is not None:
                curve = self._needed_curve(k0, u, gl, w)
                need.append(curve[0])
                gain.append(curve[1])
        if self.capacity is None:
            need, gain = self._no_floors
        return np.array(need), np.array(gain), np.array(targets, dtype=np.int64)

    def _crossing_floors(self):
        """Per DC ``k0`` and prefix end ``a``: the least occupancy and the least traversal
        of a boundary ``b' <= a`` between two DCs ``k1 < k2 <= k0`` (``inf`` for ``k0 = 0``
        or ``a = 0``, where no prefix crosses a link); ``O(L K)`` from
        :meth:`~chainpipe.tables.CostTables.crossing_floors`."""
        least_u, least_q = self.t.crossing_floors()
        cross_u, cross_q = [], []
        for u, q in zip(least_u.copy(), least_q.copy()):
            u[0] = q[0] = np.inf
            cross_u.append(np.minimum.accumulate(u))
            cross_q.append(np.minimum.accumulate(q))
        return cross_u, cross_q

    def _first_reachable(self, b: int, k: int) -> int:
        """The least ``k0 < k`` whose chain path to ``k`` keeps the boundary at ``b`` within
        the cap (``k`` if none): a longer path is never faster, so the scan stops at the
        first path past the cap and costs only the reachable span."""
        limit = self.cap * (1 + 1e-12)
        k0 = k
        while k0 > 0 and not limit < self.t.occupancy(b, k0 - 1, k):
            k0 -= 1
        return k0

    def _moves(self, b: int, key):
        """The next stage's groups before a state ``key = (k, u)`` at layer ``b``.

        Yields ``(g, k0, local index of g, usage of k0 before the stage, U, Q)``: a group
        ``g`` of a datacenter ``k0 <= k`` with a device left, and the boundary at ``b``
        from ``k0`` to ``k`` (none when nothing is placed yet).
        """
        k, u = key
        for k0, U, Q in self._boundaries(b, k):
            base = u if k0 == k else self.unused[k0]
            for g in self.groups_of[k0]:
                gl = self.local[g]
                if base[gl] >= self.count[g]:
                    continue
                yield g, k0, gl, base, U, Q

    def _boundaries(self, b: int, k: int) -> list:
        """The DCs ``k0 <= k`` the stage before a state of DC ``k`` at layer ``b`` may use,
        with the boundary's occupancy and traversal ``(k0, U, Q)`` (``U`` within the cap);
        every DC with no boundary when nothing is placed yet. Once per ``(b, k)``."""
        got = self.reach.get((b, k))
        if got is None:
            self.deadline.check()
            t, limit = self.t, self.cap * (1 + 1e-12)
            if k == self.K:  # nothing placed yet
                got = [(k0, 0.0, 0.0) for k0 in range(self.K)]
            else:
                got = []
                for k0 in range(self._first_reachable(b, k), k + 1):
                    U = float(t.occupancy(b, k0, k))
                    if not limit < U:
                        got.append((k0, U, float(t.traversal(b, k0, k))))
            self.reach[(b, k)] = got
        return got

    def _backtrack(self, states, parent) -> list[tuple[int, int, int, int, int, int]]:
        """The stages ``(start, end, dc, group in dc, d, t)`` of the plan ending at ``parent``
        ``(b, key, label, 0, g, pair)``: each label's ``meta`` names the stage that made it
        (:attr:`metas`) and ``label`` the label of the next state it extended."""
        t = self.t
        b, key, idx, a, g, ci = parent
        stages = []
        while True:
            opts = t.options(g)
            stages.append((a, b, int(t.group_dc[g]), t.groups[g].index, int(opts.d[ci]),
                           int(opts.t[ci])))
            meta, idx, ci = states[b][key][1][idx].tolist()
            if meta < 0:
                return stages
            a = b
            b, key, g = self.metas[meta]


class _Feasible(_Search):
    """Whether any plan exists at all (``docs/dp.md``, "Why it is exact", item 9): the
    search of :class:`_Search` with every cost set to zero and no bound.

    Every label of a state is then ``(0, 0, p, 0)``: the filters keep its least ``p``
    per state, and across the states of a datacenter those no state with fewer devices
    in use and no larger ``p`` dominates. A stage into a datacenter ``k0`` before the
    state's own starts on fresh devices, so its images do not depend on the state but
    on its ``p``; of the states of a layer in datacenters after ``k0`` only one with the
    least ``p`` makes them (memory only tightens with ``p``). The first complete plan
    lowers the live bound to 0, which ends the search.
    """

    def __init__(self, tables: CostTables, deadline: Deadline, dominated: dict):
        super().__init__(tables, math.inf, deadline, None, dominated)
        self.merge_crossings = False  # its own choice of the state that moves (_moves)
        self._free_reach: dict = {}
        self._fresh: list = []

    def _candidate_stages(self):
        """:meth:`_Search._candidate_stages` at no cost: ``C`` and ``R`` zero (the
        options whose ``C`` is not finite dropped)."""
        cands, t_max = super()._candidate_stages()
        free: dict = {}
        out = []
        for per_end in cands:
            if id(per_end) not in free:
                rows = []
                for table in per_end:
                    if table is not None:
                        table = table[np.isfinite(table[:, 1])].copy()
                        table[:, 1] = table[:, 4] = 0.0
                    rows.append(table if table is not None and len(table) else None)
                free[id(per_end)] = rows
            out.append(free[id(per_end)])
        return out, t_max

    def _boundaries(self, b: int, k: int) -> list:
        """:meth:`_Search._boundaries` with every boundary free."""
        got = self._free_reach.get((b, k))
        if got is None:
            got = self._free_reach[(b, k)] = [(k0, 0.0, 0.0)
                                              for k0, _, _ in super()._boundaries(b, k)]
        return got

    def _filter_layer(self, b: int, sync: bool, steady: int, kernel) -> dict:
        """:meth:`_Search._filter_layer`, and per ``k0`` the state of least ``p`` among
        those of the layer in a datacenter after ``k0`` (the one that moves into it)."""
        layer = super()._filter_layer(b, sync, steady, kernel)
        least: dict = {}
        for key, (X, _) in layer.items():
            got = least.get(key[0])
            if got is None or X[0, 2] < got[0]:
                least[key[0]] = (X[0, 2], key)
        self._fresh = [None] * (self.K + 2)
        for k in range(self.K, -1, -1):
            got = least.get(k)
            after = self._fresh[k + 1]
            self._fresh[k] = got if after is None or (got is not None and got[0] < after[0]) \
                else after
        return layer

    def _moves(self, b: int, key):
        """:meth:`_Search._moves`, a move into an earlier datacenter ``k0`` only from the
        state that :meth:`_filter_layer` chose for it."""
        for move in super()._moves(b, key):
            k0 = move[1]
            if k0 == key[0] or self._fresh[k0 + 1][1] == key:
                yield move


def feasible(tables: CostTables, deadline: Deadline, dominated: dict | None = None) -> bool:
    """Whether an instance has any plan (memory and device counts), whatever its time.

    Parameters
    ----------
    tables : CostTables
        The instance's tables (version 1 or 2, one pipeline).
    deadline : Deadline
        Checked as the search goes.
    dominated : dict, optional
        The run's option dominance (:func:`_dominance`), computed if not given.

    Returns
    -------
    bool
        ``True`` when a plan exists (the search of :class:`_Feasible` found one).

    Raises
    ------
    TimeUp
        The deadline passed first.
    """
    if dominated is None:
        dominated = _dominance(tables, deadline)
    return _Feasible(tables, deadline, dominated).run() is not None


class _PerDC:
    """A figure per datacenter ``k``, computed when first asked (a long chain asks few)."""

    def __init__(self, compute):
        self.compute = compute
        self.known: dict[int, object] = {}

    def __call__(self, k: int):
        if k not in self.known:
            self.known[k] = self.compute(k)
        return self.known[k]

    def upto(self, k: int) -> list:
        """The figures of the datacenters before ``k``."""
        return [self(j) for j in range(k)]


def usage_caps(tables: CostTables) -> list[int]:
    """Devices per group a search counts up to: the count, or what ``L`` stages of the
    widest option take if fewer."""
    return [int(min(c, tables.L * tables.widest)) for c in tables.count]


class LayerCapacity:
    """How many FLOP free devices can hold with every stage's ``C <= B``: a bound that
    sees the layers' granularity, which the spread of rates does not.

    A stage with pair ``c`` on group ``g`` and ``C <= B`` holds at most
    ``fmax(c, B)``, the most FLOP of any layer range whose ``C`` with that pair is at
    most ``B`` and which fits memory at the last position (the least any stage
    stashes). So ``n`` free devices of ``g`` hold at most the best sum of ``fmax`` over
    stages whose widths add up to ``n`` or less: an unbounded knapsack, solved once per
    breakpoint of ``B``. A prefix of ``F`` FLOP fits under ``B`` only if the free
    devices hold ``F``. (Counting layers instead of FLOP was tried: a cheap embedding
    layer lets every device hold "a layer" and the bound says nothing.)

    Used by the version-2 search, the version-3 searches (``dp_pipelines.Holds``) and
    the CDynP agents' floors (``cdynp/floors.py``).

    Parameters
    ----------
    tables : CostTables
    count : list of int
        Per group, the most devices a plan may use (:func:`usage_caps`).
    check : callable, optional
        Called between groups and knapsack rows (a deadline's check).
    need : int, optional
        The stash a stage's options must hold (default: the least any stage stashes,
        the last stage's count).
    """

    def __init__(self, tables: CostTables, count: list[int], check=None,
                 need: int | None = None):
        # the least any stage stashes (the last stage's count); a smaller ``need`` holds
        # more and stays a valid floor for any larger stash (a GPipe pipeline of M_p < M)
        need = tables.in_flight(1) if need is None else need
        check = check or (lambda: None)
        #: per group: breakpoints of B, knapsack table [point, n <= n0], LP ratio per point
        #: and the L-stage cap per point (groups with the same options and cap share one)
        self.arrays: list[tuple] = []
        shared: dict = {}
        for g in range(tables.G):
            check()
            opts = tables.options(g)
            key = (id(opts), count[g])
            if key not in shared:
                points, fmax = _most_held(tables, opts, need)
                shared[key] = (points, *_knapsack(fmax, opts.width.tolist(), count[g],
                                                  tables.L, check))
            self.arrays.append(shared[key])
        self._before: dict[tuple, tuple] = {}
        self._prefixes: dict[tuple, tuple] = {}
        self._held: dict[tuple, np.ndarray] = {}
        self._frames: dict[tuple, tuple] = {}
        self._parts: dict[tuple, dict] = {}
        #: what a search keeps per state key across its trials (``dp._Search._needed_curve``)
        self.floors: dict = {}
        self.count = count
        #: the deadline's check, called in the loops over groups
        self.check = check
        #: the floors by position (:class:`ChainCapacity`) a version-2 search adds, if any
        self.chain: ChainCapacity | None = None

    @staticmethod
    def affordable(tables: CostTables) -> bool:
        """Whether its tables stay within :data:`KNAPSACK_CELLS` for every group: at most
        one breakpoint per pair and range, times the pairs (a long list of widths on a
        large count would not fit; the search is exact without this bound, only slower)."""
        ranges = tables.L * (tables.L + 1) // 2
        return all(len(tables.pairs(g)) ** 2 * ranges <= KNAPSACK_CELLS
                   for g in range(tables.G))

    def group_many(self, g: int, free: np.ndarray, bottleneck: np.ndarray) -> np.ndarray:
        """FLOP ``free`` devices of group ``g`` hold with every ``C <= bottleneck``
        (arrays of free counts and bottlenecks): the knapsack's value up to its table's
        width, beyond it the LP bound (``free`` times the best FLOP per device, at most
        ``L`` stages of the most one stage holds), an upper bound as the prunes need."""
        breaks = self.arrays[g][0]
        if not len(breaks):
            return np.zeros(np.shape(bottleneck))
        return self._held_at(g, free, np.searchsorted(breaks, bottleneck, side="right") - 1)

    def _held_at(self, g: int, free, i: np.ndarray) -> np.ndarray:
        """:meth:`group_many` at the breakpoint indices ``i`` of group ``g`` (``-1``:
        below its first), ``free`` an array or one count."""
        _, table, ratio, stages_cap = self.arrays[g]
        below = i < 0
        i = np.maximum(i, 0)
        free = np.minimum(np.asarray(free), self.count[g])
        n0 = table.shape[1] - 1
        got = table[i, np.clip(free, 0, n0)]
        with np.errstate(invalid="ignore", over="ignore"):
            wide = np.minimum(free * ratio[i], stages_cap[i])
        got = np.where(free > n0, np.maximum(wide, table[i, n0]), got)
        return np.where(below | (free <= 0), 0, got)

    def curve(self, before: list[int], here: list[tuple[int, int]]):
        """FLOP held under ``B`` by every device of the groups ``before`` and ``free``
        devices of each ``(group, free)`` in ``here``: breakpoints and values (arrays,
        values non-decreasing), for :meth:`needed`."""
        groups = tuple(g for g, _ in here)
        points, values, index = self._frame(before, groups)
        # a group's part at one free count, kept per frame: a search asks for every
        # usage of a DC's groups, so each count recurs with every count of the others
        # (v3-large-03: 12,171 of 12,868 parts asked again)
        parts = self._parts.setdefault((tuple(before), groups), {})
        for (g, free), i in zip(here, index):
            if len(self.arrays[g][0]):
                part = parts.get((g, free))
                if part is None:
                    part = parts[g, free] = self._held_at(g, free, i)
                values = values + part
        return points, values

    def _frame(self, before: list[int], groups: tuple) -> tuple:
        """What :meth:`curve` needs of ``before`` and the groups of ``here`` whatever
        their free counts: the breakpoints, the values the groups ``before`` hold there,
        and each group's breakpoint index there; once per argument (a search asks for
        the same groups with many counts)."""
        key = (tuple(before), groups)
        got = self._frames.get(key)
        if got is None:
            b_points, b_values = self.before(before)
            points = distinct(np.concatenate([b_points] + [self.arrays[g][0] for g in groups]))
            j = np.searchsorted(b_points, points, side="right") - 1
            values = np.where(j >= 0, b_values[np.maximum(j, 0)] if len(b_values) else 0.0,
                              0.0)
            index = [np.searchsorted(self.arrays[g][0], points, side="right") - 1
                     for g in groups]
            got = self._frames[key] = (points, values, index)
        return got

    def for_prefixes(self, before: list[int], here: tuple, flop: np.ndarray):
        """For every prefix FLOP in ``flop``: the least bottleneck under which every
        device of the groups ``before`` and the free ones of ``here`` (as in :meth:`curve`)
        hold it, the same for those of ``here`` alone, and the curve of ``here`` alone;
        computed once per argument (every trial of a run asks for the same ones)."""
        key = (tuple(before), here)
        got = self._prefixes.get(key)
        if got is None:
            local = self.curve([], list(here))
            got = self._prefixes[key] = (self.held_prefixes(before, here, flop),
                                         self.needed(local, flop), local)
        return got

    def held_prefixes(self, before: list[int], here: tuple, flop: np.ndarray) -> np.ndarray:
        """The first of :meth:`for_prefixes` alone (what the version-3 searches read),
        computed once per argument."""
        key = (tuple(before), here)
        got = self._held.get(key)
        if got is None:
            got = self._held[key] = self.needed(self.curve(before, list(here)), flop)
        return got

    @staticmethod
    def held(curve, bottleneck: float) -> float:
        """The FLOP a curve of :meth:`curve` holds under ``bottleneck``."""
        points, values = curve
        i = int(np.searchsorted(points, bottleneck, side="right")) - 1
        return float(values[i]) if i >= 0 else 0.0

    @staticmethod
    def needed(curve, flop):
        """The least bottleneck under which a curve of :meth:`curve` holds ``flop``
        (arrays or scalars); ``inf`` where it never does."""
        points, values = curve
        i = np.searchsorted(values, np.asarray(flop) / HOLD_SLACK, side="left")
        return np.where(i < len(points), points[np.minimum(i, len(points) - 1)]
                        if len(points) else np.inf, np.inf)

    def before(self, groups: list[int]) -> tuple[np.ndarray, np.ndarray]:
        """FLOP every device of ``groups`` holds as a step function of the bottleneck:
        breakpoints and values, computed once per set of groups (alike groups, which
        share their tables, once per kind: a long chain of one type costs one)."""
        key = tuple(groups)
        if key not in self._before:
            kinds: dict = {}  # (table, count) -> [a group of it, how many]
            for g in groups:
                kind = kinds.setdefault((id(self.arrays[g]), self.count[g]), [g, 0])
                kind[1] += 1
            self.check()
            points = distinct(np.concatenate([self.arrays[g][0] for g, _ in kinds.values()]
                                              + [np.zeros(0)]))
            values = np.zeros(len(points))
            for g, n in kinds.values():
                self.check()
                values += n * self.group_many(g, np.full(len(points), self.count[g]), points)
            self._before[key] = (points, values)
        return self._before[key]


class ChainCapacity:
    """What the devices of a chain's first DCs hold under a bottleneck ``B``, seeing that
    a stage's memory depends on its position (``docs/dp.md``, "The chain floor").

    Under 1F1B a stage at position ``q`` (1 = the last stage) stashes ``min(M, q)``
    microbatches, and a pipeline visits the DCs in chain order, so the stages of a DC
    sit at later positions than those of every DC after it: a prefix of the chain that
    comes before ``p`` stages holds at most what its stages hold at positions ``p + 1``
    and on. Per group the most its devices hold with ``s`` stages, the ``j``-th of them
    at position ``q + j`` or later (:func:`.label_kernel.position_knapsack`), then per DC
    from the last one placed (:func:`.label_kernel.chain_held`): a floor under the
    bottleneck of the whole chain (``hybrid-large`` seed 2: 0.62 with
    :class:`LayerCapacity`, 0.95 with this; its optimum's is 1.02) and of a label's
    prefix, by the label's stage count.

    Floors are read on a grid of bottlenecks (the largest point under which the devices
    do not hold the FLOP); positions are counted up to :data:`CHAIN_POSITIONS` (a later
    position counts as that one: its stash is no smaller).

    Parameters
    ----------
    tables : CostTables
    count : list of int
        Per group, the most devices a plan may use (:func:`usage_caps`).
    check : callable
        Called between groups (a deadline's check).
    """

    def __init__(self, tables: CostTables, count: list[int], check):
        from .label_aot import load

        self.kernel = label_kernel = load()
        self.t, self.count, self.check = tables, count, check
        need = tables.in_flight(1)
        kinds: dict = {}
        self.kind_of = np.zeros(tables.G, dtype=np.int64)
        self.kinds: list = []  # per kind: sorted ranges, widths, count
        below = 0  # the largest in-flight limit below M (where positions stop mattering)
        for g in range(tables.G):
            check()
            opts = tables.options(g)
            # what C and N read (not the DC's link, which only R reads)
            key = (tables._options_key(g)[:5], count[g])
            if key not in kinds:
                kinds[key] = len(self.kinds)
                ranges = label_kernel.sorted_ranges(opts.compute_time, opts.max_in_flight,
                                                    tables.stage_flop, need)
                n = ranges[2][ranges[2] < tables.M]
                below = max(below, int(n.max(initial=0)))
                self.kinds.append((ranges, opts.width.astype(np.int64), int(count[g])))
            self.kind_of[g] = kinds[key]
        positions = min(tables.M, below + 1, tables.L, CHAIN_POSITIONS)
        self.needs = np.array([tables.in_flight(q + 1) for q in range(positions)],
                              dtype=np.int64)
        self.grid = np.zeros(0)
        #: a run's prefix floors, per (state key, position) (``dp._Search._chain_floor``),
        #: and stacked per width of a move's group (``dp._Search._chain_rows``)
        self.floors: dict = {}
        self.rows: dict = {}
        self.free: list = []
        self.held = np.zeros((tables.K + 1, positions, 0))

    @staticmethod
    def useful(tables: CostTables) -> bool:
        """Whether positions matter (1F1B, more than one microbatch) and the tables stay
        within :data:`CHAIN_CELLS` at :data:`CHAIN_POINTS` bottlenecks."""
        if tables.schedule == "gpipe" or tables.M < 2 or tables.single_device:
            return False
        positions = min(tables.M, tables.L, CHAIN_POSITIONS)
        cells = sum(len(tables.pairs(g)) * c * positions * positions
                    for g, c in zip(range(tables.G), usage_caps(tables)))
        return cells * CHAIN_POINTS <= CHAIN_CELLS

    def _tables(self, grid: np.ndarray) -> tuple[list, np.ndarray]:
        """Per kind the knapsack tables of :func:`.label_kernel.position_knapsack` on
        ``grid``: the ``free`` ones, and the chain's :func:`.label_kernel.chain_held`.
        Positions past the last at which a stage holds less than at the one before, on
        every kind and point of ``grid``, are one position (the tables are the same)."""
        held_one = [self.kernel.held_on_grid(*ranges, self.needs, grid)
                    for ranges, _, _ in self.kinds]
        nq = 1 + max((int(np.flatnonzero((A[1:] != A[:-1]).any(axis=(1, 2))).max(initial=-1))
                      + 1 for A in held_one), default=0)
        S = max(1, nq - 1)
        full = np.empty((len(self.kinds), nq, len(grid), S + 1))
        free = []
        for i, (A, (_, widths, count)) in enumerate(zip(held_one, self.kinds)):
            self.check()
            full[i], f = self.kernel.position_knapsack(np.ascontiguousarray(A[:nq]), widths,
                                                       count, S)
            free.append(f)
        held = self.kernel.chain_held(full, self.kind_of, self.t.group_dc, self.t.K)
        return free, held

    def bottleneck(self, low: float, flop: float) -> float:
        """A floor under the bottleneck of any plan of ``flop`` FLOP: bisection on grids
        of :data:`CHAIN_BISECT` points from ``low`` (a floor already known) up; the top
        of the first grid (``low`` times :data:`CHAIN_SPAN` ** 4) when none holds it
        (the search proves the rest)."""
        target = flop / HOLD_SLACK
        lo, hi = low, low * CHAIN_SPAN ** 4
        for _ in range(CHAIN_ROUNDS):
            grid = np.geomspace(lo, hi, CHAIN_BISECT) if lo > 0 else np.linspace(0, hi,
                                                                                 CHAIN_BISECT)
            _, held = self._tables(grid)
            j = int(np.searchsorted(held[-1, 0], target, side="left"))
            if j == 0:
                return lo
            if j == len(grid):
                return grid[-1]
            lo, hi = grid[j - 1], grid[j]
        return lo

    def floored(self, low: float, flop: float) -> float:
        """:meth:`bottleneck`, with the prefix floors' grid set around it where it is
        above 0 (:data:`CHAIN_POINTS` from :data:`CHAIN_LOW` to :data:`CHAIN_HIGH` times
        it; else no grid, and no prefix floors)."""
        floor = self.bottleneck(low, flop)
        if floor > 0:
            self.set_grid(np.geomspace(CHAIN_LOW * floor, CHAIN_HIGH * floor, CHAIN_POINTS))
        return floor

    def set_grid(self, grid: np.ndarray) -> None:
        """Compute the tables the prefix floors read (:meth:`prefix_floors`) on ``grid``."""
        self.grid = grid
        free, self.held = self._tables(grid)
        # the kinds' free tables side by side (padded to the most devices), for the kernel
        most = max(f.shape[2] for f in free)
        self.free = np.zeros(free[0].shape[:2] + (most,) + (len(free),))
        for i, f in enumerate(free):
            self.free[:, :, :f.shape[2], i] = f
            self.free[:, :, f.shape[2]:, i] = f[:, :, -1:]

    def prefix_floors(self, k0: int, free, q: int, flop: np.ndarray,
                      before: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """Per prefix FLOP in ``flop``: a floor under the bottleneck of a prefix held by
        the DCs before ``k0`` (unless not ``before``) and the free devices ``(group,
        free)`` of ``k0``, with its stages at position ``q`` (0-based) or later; 0 where
        the grid's first point holds it (:func:`.label_kernel.chain_floor`). Also what
        they hold per point of the grid."""
        kinds, counts = self._kinds(free)
        return self.kernel.chain_floor(self.held[k0], self.free, kinds, counts,
                                       min(q, self.held.shape[1] - 1), flop / HOLD_SLACK,
                                       self.grid, before)

    def position_floors(self, k0: int, free, flop: np.ndarray) -> np.ndarray:
        """:meth:`prefix_floors` (the DCs before ``k0`` counted) at every position the
        chain tells apart: row ``q`` for stages at position ``q`` or later; the devices'
        kinds and the slack made once for all of them."""
        kinds, counts = self._kinds(free)
        out = np.empty((self.held.shape[1], len(flop)))
        self.kernel.position_floors(self.held[k0], self.free, kinds, counts, flop / HOLD_SLACK,
                                    self.grid, out)
        return out

    def _kinds(self, free) -> tuple[np.ndarray, np.ndarray]:
        """The kinds and counts of the free devices ``(group, free)``, as the kernel reads
        them."""
        return (np.array([self.kind_of[g] for g, _ in free], dtype=np.int64),
                np.array([n for _, n in free], dtype=np.int64))

    def held_under(self, hold: np.ndarray, bottleneck: float) -> float:
        """At most what devices holding ``hold`` per point of the grid (of
        :meth:`prefix_floors`) hold under ``bottleneck``: their most at the first point
        not below it (``inf`` past the grid)."""
        j = int(np.searchsorted(self.grid, bottleneck, side="left"))
        return float(hold[j]) if j < len(self.grid) else np.inf


#: positions the chain floor tells apart (:class:`ChainCapacity`)
CHAIN_POSITIONS = 32
#: bottlenecks of the prefix floors' grid (:class:`ChainCapacity`), geometric from
#: :data:`CHAIN_LOW` to :data:`CHAIN_HIGH` times the chain's floor
CHAIN_POINTS = 64
CHAIN_LOW = 0.7
CHAIN_HIGH = 1.6
#: points per round of the chain floor's bisection, its rounds (a bracket of 0.07 %
#: at the end), and the span of its first grid
CHAIN_BISECT = 8
CHAIN_ROUNDS = 4
CHAIN_SPAN = 1.5
#: cells (pairs x devices x positions^2 x grid points) the chain floor may work through
CHAIN_CELLS = 400_000_000


def distinct(values: np.ndarray) -> np.ndarray:
    """The distinct values of ``values`` in ascending order, as :func:`numpy.unique` (no
    NaN among them), which in NumPy 2 imports ``numpy.ma`` on its first call: 18 ms of a
    fresh process's first solve."""
    x = np.sort(values, axis=None)
    return x[np.concatenate(([True], x[1:] != x[:-1]))] if len(x) else x


def _most_held(tables: CostTables, opts, need: int) -> tuple[np.ndarray, np.ndarray]:
    """Breakpoints of the bottleneck ``B`` and ``fmax[point, pair]``: the most FLOP one
    stage with that pair holds with ``C <= B`` and memory fitting at the last position."""
    flop = tables.stage_flop
    steps = []  # per pair: (C at which fmax rises, fmax from there on)
    for p in range(len(opts.width)):
        fit = (opts.max_in_flight[p] >= need) & np.isfinite(opts.compute_time[p])
        c, f = opts.compute_time[p][fit], flop[fit]
        order = np.argsort(c, kind="stable")
        c, f = c[order], np.maximum.accumulate(f[order]) if len(f) else f[order]
        rises = np.flatnonzero(np.diff(f, prepend=-1.0) > 0)
        steps.append((c[rises], f[rises]))
    points = distinct(np.concatenate([x for x, _ in steps] + [np.zeros(0)]))
    fmax = np.zeros((len(points), len(steps)))
    for p, (x, y) in enumerate(steps):
        i = np.searchsorted(x, points, side="right") - 1
        fmax[:, p] = np.where(i >= 0, y[np.maximum(i, 0)] if len(y) else 0.0, 0.0)
    return points, fmax


def _knapsack(fmax: np.ndarray, widths: list[int], n_max: int, layers: int, check):
    """The unbounded knapsack of :class:`LayerCapacity` per breakpoint, for ``n`` free
    devices up to ``n0 <= n_max`` (``n0`` keeps the table and its work within
    :data:`KNAPSACK_CELLS` and :data:`KNAPSACK_STEPS`, whatever the count or the widths' values), with the LP ratio
    (best FLOP per device) and ``L`` times the most one stage holds for ``n > n0``.

    Returns ``(table [point, n], ratio [point], stages_cap [point])``.
    """
    n_points, w = fmax.shape[0], np.asarray(widths, dtype=float)
    ratio = (fmax / w[None, :]).max(axis=1, initial=0.0)
    stages_cap = layers * fmax.max(axis=1, initial=0.0)
    steps = max(1, len(widths))
    n0 = int(max(0, min(n_max, KNAPSACK_CELLS // max(1, n_points * steps),
                        KNAPSACK_STEPS // steps)))
    best = np.zeros((n_points, n0 + 1))
    usable = [(p, wd) for p, wd in enumerate(widths) if wd <= n0]
    for n in range(1, n0 + 1):
        if n % 64 == 0:
            check()
        best[:, n] = best[:, n - 1]
        for p, wd in usable:
            if wd <= n:
                np.maximum(best[:, n], best[:, n - wd] + fmax[:, p], out=best[:, n])
    return best, ratio, stages_cap


#: cells (breakpoints x free counts x pairs) the capacity knapsack of a group may work
#: through; beyond it, counts are bounded by the LP ratio (weaker, never wrong)
KNAPSACK_CELLS = 20_000_000
#: (free count, pair) steps of that knapsack, each one numpy operation
KNAPSACK_STEPS = 100_000


#: the FLOP capacity is compared with a relative slack, so that rounding in its sums
#: never cuts a prefix that fits exactly
HOLD_SLACK = 1 + 1e-9



def backtrack_stages(tables: CostTables, states, parent, link: int
                     ) -> list[tuple[int, int, int, int, int, int]]:
    """The stages ``(start, end, dc, group in dc, d, t)`` of a plan, from its last parent.

    ``parent = (b, key, idx, a, g, pair)`` means stage ``[a, b)`` on group ``g`` with that
    ``(d, t)``; the label at ``states[b][key][idx]`` holds the next parent at index ``link``.
    Shared by the version-2 search and the version-3 one (:mod:`.dp_period`).
    """
    stages = []
    while parent is not None:
        b, key, idx, a, g, ci = parent
        opts = tables.options(g)
        stages.append((a, b, int(tables.group_dc[g]), tables.groups[g].index, int(opts.d[ci]),
                       int(opts.t[ci])))
        parent = states[b][key][idx][link]
    return stages
