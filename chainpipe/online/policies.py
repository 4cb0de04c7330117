"""Placement policies: what each does with the jobs waiting and the resources free now.

A policy is a class with a ``name`` and :meth:`Policy.place`; the simulator
calls ``place`` whenever something changes (an arrival, a finish, a
background step) with the jobs waiting in arrival order, and allocates what
it returns. Every plan a policy returns is timed by the one cost model
(:func:`chainpipe.solve` re-evaluates its plan with
:func:`chainpipe.plan.evaluate`); no policy computes an iteration time itself.

- ``first-fit``: the first (shortest) chain holding the job's GPU budget, planned
  by the ``megatron`` baseline (equal layers, tensor parallelism over a node);
  the job's whole wavelength allowance reserved.
- ``comm-unaware``: the ``k`` shortest chains, each planned by the exact DP with
  every link free (the ``comm-unaware`` solver); the plan with the best link-free
  time is placed and then lives with the real links.
- ``chain-dp``: the ``k`` shortest chains, each planned exactly by ``dp`` on the
  free devices and the wavelengths free now (up to the job's allowance); the
  best plan is placed and its wavelengths reserved.
- ``cba`` (:mod:`.cba`) and ``gmc-mdp`` (:mod:`.gmc_mdp`).
- ``chain-dp-replan``: ``chain-dp``'s placements; when a link or device event changes a
  running job's links or GPUs it keeps, re-plans or moves the job, whichever leaves the
  least time (:mod:`.adapt`, through :func:`chainpipe.replan.replan`). Every other policy
  keeps its running plans on the changed network. Not among the default policies of
  ``simulate``.
"""

from __future__ import annotations

from .adapt import Adaptation, counts, decide, keep, kept
from .catalogue import ALL_POLICIES, POLICIES  # noqa: F401 (POLICIES: re-exported)
from .jobs import JobRequest
from .offers import Planner
from .state import Placement, ResourceState


class Policy:
    """A placement policy; subclasses plan one job at a time with :meth:`plan_job`.

    Parameters
    ----------
    planner : Planner
        Offers and the solve cache (shared by the policies of one run).
    """

    name = ""

    def __init__(self, planner: Planner):
        self.planner = planner
        self.k = planner.planning.k_paths
        #: why the last attempt for a job found nothing, by job id
        self.reasons: dict[int, str] = {}
        #: what it did with running jobs when their links changed, in order
        self.adaptations: list[Adaptation] = []

    def place(self, waiting: list[JobRequest], state: ResourceState,
              now: float) -> list[Placement]:
        """Placements for some of ``waiting``, allocated on ``state`` in order.

        Parameters
        ----------
        waiting : list of JobRequest
            In arrival order.
        state : ResourceState
            What is free now; the placements returned are already allocated on it.
        now : float
            Simulated time.

        Returns
        -------
        list of Placement
        """
        out = []
        for job in waiting:
            p = self.plan_job(job, state)
            if p is not None:
                state.allocate(p)
                out.append(p)
        return out

    def observe(self, now: float, state: ResourceState) -> None:
        """Called at every background step (after the traffic changed); default: nothing."""

    def report(self) -> dict:
        """Extra figures of the policy for the summary (forecast errors); default none. The
        simulator adds the counts of its decisions on running jobs when a link or device event touched
        one (:meth:`adaptation_report`)."""
        return {}

    def adaptation_report(self) -> dict:
        """:func:`.adapt.counts` of its decisions at link and device events; none without any."""
        return counts(self.adaptations) if self.adaptations else {}

    def adapt(self, p: Placement, state: ResourceState, left: float,
              now: float) -> Placement:
        """A running job's placement after a link it crosses changed (:mod:`.adapt`).

        Parameters
        ----------
        p : Placement
            The job's placement until now (allocated on ``state``).
        state : ResourceState
            The resources, the links' events included.
        left : float
            Iterations the job still has to run.
        now : float

        Returns
        -------
        Placement
            From now on: ``p`` re-priced on the changed links (kept, the default), or a new
            plan on its resources or elsewhere (``note`` says which; the simulator moves
            the job, pausing it for the move of its parameter state).
        """
        now_p = kept(self.planner, p, state)
        self.adaptations.append(keep(p, now_p, left, now))
        return now_p

    def plan_job(self, job: JobRequest, state: ResourceState) -> Placement | None:
        """One job's placement on ``state``, or ``None``. A policy overrides this (the
        default :meth:`place` takes the waiting jobs one by one) or :meth:`place` itself
        (``cba`` assigns them together)."""
        raise NotImplementedError(f"{type(self).__name__} overrides neither plan_job nor place")

    def no_chain(self, job: JobRequest, state: ResourceState) -> None:
        self.reasons[job.id] = self.planner.why_not(job, state)

    def best_dp(self, job: JobRequest, state: ResourceState, chains,
                wavelengths=None, score=None) -> Placement | None:
        """The best ``dp`` plan over ``chains``: each chain's offer with ``wavelengths(chain)``
        per span (default: the job's full allowance), ranked by ``score(chain, T)``
        (default ``T``); ties go to the earlier chain."""
        best, best_score = None, None
        for c in chains:
            wl = (wavelengths or (lambda c: self.planner.full_wavelengths(job, state, c)))(c)
            offer = self.planner.offer(job, state, c, wl)
            plan, T, res = self.planner.solve(offer, "dp")
            if plan is None:
                self.reasons[job.id] = f"no plan on {'-'.join(c.datacenters)}: {res.message}"
                continue
            s = T if score is None else score(c, T)
            if best_score is None or s < best_score:
                best, best_score = self.planner.placement(job, offer, plan, T), s
        return best

    def comm_bound(self, job: JobRequest, state: ResourceState, chain, spans=None):
        """``(full, bound)``: the ``dp`` placement on ``chain`` with the job's whole wavelength
        allowance, and the one with the fewest wavelengths ``w`` (the same on each span of
        ``spans``, default all; ``min(w, free)``) whose time stays within ``1 + comm_slack``
        of it (``full`` itself when no fewer do). ``(None, None)`` without a plan."""
        full = self.planner.full_wavelengths(job, state, chain)
        p = self.best_dp(job, state, [chain], lambda c: full)
        if p is None:
            return None, None
        spans = set(chain.spans if spans is None else spans)
        limit = p.iteration_time_s * (1 + self.planner.planning.comm_slack)
        for w in range(1, max(full.values(), default=0)):
            trial = {s: (min(w, n) if s in spans else n) for s, n in full.items()}
            q = self.best_dp(job, state, [chain], lambda c, trial=trial: trial)
            if q is not None and q.iteration_time_s <= limit:
                return p, q
        return p, p


class FirstFit(Policy):
    """The first chain, shortest first, holding the job's budget; a uniform (Megatron) plan."""

    name = "first-fit"

    def plan_job(self, job, state):
        chains = self.planner.candidates(job, state)
        if not chains:
            self.no_chain(job, state)
            return None
        for c in chains:
            offer = self.planner.offer(job, state, c, self.planner.full_wavelengths(job, state, c))
            plan, T, res = self.planner.solve(offer, "megatron")
            if plan is not None:
                return self.planner.placement(job, offer, plan, T)
            self.reasons[job.id] = f"no uniform plan fits: {res.message}"
        return None


class CommUnaware(Policy):
    """The exact plan as if links were free, on the best of the ``k`` shortest chains; its
    time is then the cost model's with the real links."""

    name = "comm-unaware"

    def plan_job(self, job, state):
        chains = self.planner.candidates(job, state, self.k)
        if not chains:
            self.no_chain(job, state)
            return None
        best, best_free = None, None
        for c in chains:
            offer = self.planner.offer(job, state, c, self.planner.full_wavelengths(job, state, c))
            plan, T, res = self.planner.solve(offer, "comm-unaware")
            if plan is None:
                self.reasons[job.id] = f"no plan: {res.message}"
                continue
            blind = res.stats.get("link_free_time_s", T)
            if best_free is None or blind < best_free:
                best, best_free = self.planner.placement(job, offer, plan, T), blind
        return best


class ChainDP(Policy):
    """The exact ``dp`` plan on each of the ``k`` shortest chains with the free wavelengths;
    the best is placed."""

    name = "chain-dp"

    def plan_job(self, job, state):
        chains = self.planner.candidates(job, state, self.k)
        if not chains:
            self.no_chain(job, state)
            return None
        return self.best_dp(job, state, chains)


class ChainDPReplan(ChainDP):
    """``chain-dp``'s placements; a running job whose link changed is kept, re-planned on
    its own resources or moved, whichever leaves the least time (:func:`.adapt.decide`)."""

    name = "chain-dp-replan"

    def adapt(self, p, state, left, now):
        adaptation, q = decide(self, p, state, left, now)
        self.adaptations.append(adaptation)
        return q


def policy_classes() -> dict[str, type[Policy]]:
    """Every policy class by name, in the order summaries list them (the default ones, then
    ``chain-dp-replan``)."""
    from .cba import CBA
    from .gmc_mdp import GmcMdp

    classes = {c.name: c for c in (FirstFit, CommUnaware, ChainDP, CBA, GmcMdp,
                                   ChainDPReplan)}
    return {name: classes[name] for name in ALL_POLICIES}

