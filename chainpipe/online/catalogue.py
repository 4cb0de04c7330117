"""The policy names of the online simulation, each with one line (for ``--help`` and docs).

Kept apart from the policy classes so that the command line can list them
without importing the simulator.
"""

from __future__ import annotations

#: name -> one line, in the order summaries list them
POLICY_LINES = {
    "first-fit": "first chain with the GPU budget free, uniform (Megatron) plan",
    "comm-unaware": "exact plan as if links were free, on the best of the k shortest chains",
    "chain-dp": "exact dp plan with the free wavelengths on each of the k shortest chains",
    "cba": "communication-bound-aware assignment: one ILP over candidate chains and bandwidth",
    "gmc-mdp": "grey-Markov load forecast, MDP path choice, exact dp plan",
}
POLICIES = tuple(POLICY_LINES)
#: policies run only when named (``simulate --policies``), with their lines
EXTRA_POLICY_LINES = {
    "chain-dp-replan": "chain-dp, then on a link or device event keep, re-plan or move each "
                       "running job it touches (chainpipe.replan)",
}
#: every policy name ``--policies`` accepts
ALL_POLICIES = POLICIES + tuple(EXTRA_POLICY_LINES)
