"""Small solvers for testing the comparison harness, importable by its child processes.

Each has the solver signature ``run(instance, *, deadline, seed, threads, log, **options)``.
The harness tests register them in ``chainpipe.solve.SOLVERS`` under names of their own.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

from chainpipe import Outcome, Plan
from chainpipe.plan import evaluate
from helpers import brute_force


def enumerate_optimal(instance, *, deadline=None, seed=0, threads=1, log=None, **options) -> Outcome:
    """Exact by enumeration (tiny instances only); reports the thread cap it ran under."""
    T, plan = brute_force(instance)
    stats = {"threads": threads, "omp_num_threads": os.environ.get("OMP_NUM_THREADS")}
    if plan is None:
        return Outcome("infeasible", message="no plan fits", stats=stats)
    return Outcome("optimal", plan, T, stats=stats)


def first_device(instance, *, deadline=None, seed=0, threads=1, log=None, **options) -> Outcome:
    """Heuristic: the whole model as one stage on the first device where it fits."""
    for name in instance.device_names():
        plan = Plan.from_dict({"stages": [{"layers": [0, instance.num_layers], "device": name}]})
        if evaluate(instance, plan).feasible:
            return Outcome("feasible", plan)
    return Outcome("no_solution", message="no single device holds the model")


def anytime(instance, *, deadline=None, seed=0, threads=1, log=None, **options) -> Outcome:
    """Anytime: improves from one stage to the optimum, with a trace of incumbents and bounds."""
    start = time.perf_counter()
    T_opt, best = brute_force(instance)
    first = first_device(instance).plan
    trace = []
    if first is not None:
        trace.append([time.perf_counter() - start, evaluate(instance, first).iteration_time_s,
                      0.5 * T_opt])
    time.sleep(0.05)
    trace.append([time.perf_counter() - start, T_opt, T_opt])
    return Outcome("optimal", best, T_opt, stats={"trace": trace})


def sleeper(instance, *, deadline=None, seed=0, threads=1, log=None, **options) -> Outcome:
    """Ignores its time limit: the harness must kill it."""
    time.sleep(3600)
    return Outcome("no_solution")


def crasher(instance, *, deadline=None, seed=0, threads=1, log=None, **options) -> Outcome:
    """Dies without a word, like a segfaulting native solver."""
    os._exit(7)


def raiser(instance, *, deadline=None, seed=0, threads=1, log=None, **options) -> Outcome:
    raise RuntimeError("the backend failed")


def liar(instance, *, deadline=None, seed=0, threads=1, log=None, **options) -> Outcome:
    """Claims an optimal plan that is not (the one-stage plan): finish() demotes it."""
    return Outcome("optimal", first_device(instance).plan, None)


def sleeper_with_child(instance, *, deadline=None, seed=0, threads=1, log=None,
                       **options) -> Outcome:
    """Starts a process of its own (as a MIP backend does), then ignores its limit."""
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
    time.sleep(3600)
    return Outcome("no_solution")


def chatty(instance, *, deadline=None, seed=0, threads=1, log=None, **options) -> Outcome:
    """Prints on stdout from Python and from the file descriptor, as native backends do."""
    print("{not json, from print")
    os.write(1, b"raw bytes on fd 1\n")
    return first_device(instance)
