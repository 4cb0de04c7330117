"""The owner's watch over the agents of one run: who works, who waits, who failed.

Each agent tells its owner what it is doing (``work``, ``wait`` for a named
neighbour, ``beat`` while it computes, then ``done`` with its report or
``failed``), over whatever connects them: a socket pair to a child process
(:mod:`.runner`) or a TLS connection to an agent on another host
(:mod:`.remote`). :class:`Watch` turns those events, and connections that
close, into the run's end: every report, or one failure naming the DC.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from ...deadline import Deadline, TimeUp

#: seconds past the deadline before a silent agent is declared hung
GRACE_S = 2.0
#: seconds an agent may stay silent while it works, when no time limit is given
MESSAGE_TIMEOUT_S = 60.0
#: seconds the owner waits, after a first failure, for the agents' own accounts
SETTLE_S = 1.0
#: the longest the owner sleeps between two looks at its agents: a wait derived from a
#: huge (but finite) time limit would overflow the platform's timeouts
WAKE_MAX_S = 1.0


class AgentFailure(Exception):
    """A DC's agent died, hung, broke the protocol or failed; ``datacenter`` names it."""

    def __init__(self, message: str, datacenter: str | None):
        super().__init__(message)
        self.datacenter = datacenter


class Watch:
    """The state of every agent of a run, from its events.

    Parameters
    ----------
    names : list of str
        The DCs in chain order.
    deadline : Deadline
        The run's deadline.
    message_timeout : float
        Seconds an agent may stay silent while it should be working.
    where : list of str, optional
        Said after a DC's name in every failure (``" at host:port"``).
    """

    def __init__(self, names: list[str], deadline: Deadline, message_timeout: float,
                 where: list[str] | None = None):
        self.names = names
        self.deadline = deadline
        self.message_timeout = message_timeout
        self.where = where or [""] * len(names)
        K = len(names)
        self.state = ["starting"] * K  # starting, work, wait, done, failed, ended
        self.peer: list[str | None] = [None] * K  # whom a waiting agent waits for
        self.last = [time.monotonic()] * K  # when each agent last said anything
        self.reports: dict[int, dict] = {}
        self.failures: list[tuple[str, int, dict]] = []  # (how, index, details) in order

    def started(self) -> None:
        """Every agent has its run: silence counts from now."""
        self.last = [time.monotonic()] * len(self.names)

    def agent(self, k: int) -> str:
        return f"the agent of DC {self.names[k]!r}{self.where[k]}"

    # ------------------------------------------------------------------ events
    def event(self, k: int, event) -> None:
        """Agent ``k`` said ``event`` (a dict), or its connection ended (``None``)."""
        if not isinstance(event, dict):
            if self.state[k] not in ("done", "failed"):
                self.state[k] = "ended"
                self.failures.append(("died", k, {}))
            return
        self.last[k] = time.monotonic()
        kind = event.get("event")
        if kind in ("work", "wait"):
            self.state[k], self.peer[k] = kind, event.get("peer")
        elif kind == "done":
            self.state[k] = "done"
            self.reports[k] = event["report"]
        elif kind == "failed":
            self.state[k] = "failed"
            self.failures.append((event.get("kind"), k, event))

    def all_done(self) -> bool:
        return len(self.reports) == len(self.names)

    def run(self, next_events: Callable[[float], list], died: Callable[[int], str]) -> list[dict]:
        """Feed events until every agent is done; their reports in chain order.

        Parameters
        ----------
        next_events : callable
            ``next_events(timeout)``: the ``(k, event or None)`` pairs that arrive within
            ``timeout`` seconds (an empty list when none did).
        died : callable
            ``died(k)``: why agent ``k``'s connection ended, in a few words.

        Raises
        ------
        TimeUp
            The deadline passed while the agents were healthy.
        AgentFailure
            An agent died, hung, broke the protocol or failed; the message names its DC.
        """
        first_failure = None
        while not self.all_done():
            now = time.monotonic()
            if first_failure is None and self.failures:
                first_failure = now
            if first_failure is not None and now - first_failure >= SETTLE_S:
                raise self.verdict(died)
            self.check_hung(now)
            for k, event in next_events(self.next_wake(now, first_failure)):
                self.event(k, event)
            if first_failure is not None and all(
                    st in ("done", "failed", "ended") for st in self.state):
                raise self.verdict(died)
        return [self.reports[k] for k in range(len(self.names))]

    def next_wake(self, now: float, first_failure: float | None) -> float:
        """Seconds until something may have to be decided, in ``[0.01, WAKE_MAX_S]``."""
        times = [self.message_timeout - (now - self.last[k])
                 for k in range(len(self.names)) if self.state[k] in ("starting", "work")]
        if not self.deadline.unlimited:
            times.append(self.deadline.at + GRACE_S - now)
        if first_failure is not None:
            times.append(first_failure + SETTLE_S - now)
        return min(max(0.01, min(times, default=WAKE_MAX_S)), WAKE_MAX_S)

    def check_hung(self, now: float) -> None:
        """An agent working or starting in silence for too long, or past the deadline."""
        busy = [k for k in range(len(self.names)) if self.state[k] in ("starting", "work")]
        for k in busy:
            if now - self.last[k] > self.message_timeout:
                raise AgentFailure(f"{self.agent(k)} sent nothing for "
                                   f"{self.message_timeout:g} s while it should be working: "
                                   f"it is hung", self.names[k])
        if not self.deadline.unlimited and now > self.deadline.at + GRACE_S:
            k = self._culprit()
            raise AgentFailure(f"{self.agent(k)} did not answer by the time limit "
                               f"(+{GRACE_S:g} s): it is hung", self.names[k])

    def _culprit(self) -> int:
        """The agent the others wait for: follow who waits for whom from any agent."""
        index = {n: k for k, n in enumerate(self.names)}
        k = next((k for k in range(len(self.names)) if self.state[k] not in ("done",)), 0)
        seen = set()
        while self.state[k] == "wait" and self.peer[k] in index and k not in seen:
            seen.add(k)
            k = index[self.peer[k]]
        return k

    def verdict(self, died: Callable[[int], str]) -> Exception:
        """The failure to report, from every account collected: a death first, then a
        broken protocol or an agent's own error, then the time limit, then a lost peer."""
        rank = {"died": 0, "protocol": 1, "error": 1, "timeup": 2, "peer": 3}
        how, k, ev = min(self.failures, key=lambda f: rank.get(f[0], 9))
        name = self.names[k]
        if how == "died":
            return AgentFailure(f"{self.agent(k)} died ({died(k)})", name)
        if how == "timeup":
            return TimeUp(ev.get("error") or f"time limit reached in {name}")
        blamed = ev.get("blame") or name
        if how == "protocol":
            return AgentFailure(f"DC {blamed!r} broke the protocol: {ev.get('error')}", blamed)
        if how == "peer":
            j = self.names.index(blamed) if blamed in self.names else k
            return AgentFailure(f"{self.agent(j)} closed its connection to {name!r} mid-run",
                                blamed)
        return AgentFailure(f"{self.agent(k)} failed: {ev.get('error')}", name)
