"""The child process of one run: ``python -m chainpipe.compare.child PARENT_PID``.

It first ties itself to its parent (:func:`chainpipe.lifeline.die_with_parent`): if
the sweep dies, even by ``SIGKILL``, the run dies with it instead of running on to its
own limit.

Reads the run's specification (JSON) on stdin, rebuilds the instance and runs
it through :func:`chainpipe.solve.run_solver` with the function named by
``target`` (``module:function``); like :func:`chainpipe.solve.solve`, that owns
the deadline and re-evaluates the plan with the one cost model. The result is
written as one JSON object on the standard output the process started with;
before the solver runs, file descriptor 1 is pointed at standard error, so
whatever the solver or a native backend prints goes to the run's log instead of
into the result. A solver's exception becomes an ``error`` result.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import time
import traceback


def main(argv: list[str]) -> int:
    if len(argv) > 1:  # the parent's process id: die with it
        from ..lifeline import die_with_parent

        die_with_parent(int(argv[1]))
    result_fd = os.dup(1)  # the parent reads the result here, and only the result
    os.dup2(2, 1)          # anything printed from now on (Python or C) goes to the log
    spec = json.loads(sys.stdin.read())
    from ..io import instance_from_dict
    from ..result import Result
    from ..solve import run_solver

    instance = instance_from_dict(spec["instance"])
    start = time.perf_counter()
    try:
        module, func = spec["target"].split(":")
        run = getattr(importlib.import_module(module), func)
        result = run_solver(instance, spec["solver"], run, spec["time_limit"], spec["seed"],
                            spec["threads"], **spec.get("options", {}))
    except Exception as exc:
        elapsed = time.perf_counter() - start
        traceback.print_exc()
        message = f"{type(exc).__name__}: {exc}".splitlines()[0]
        result = Result(instance.name, spec["solver"], "error", None, None, None, elapsed,
                        message)
    data = json.dumps(result.to_dict(), allow_nan=False)
    sys.stdout.flush()
    with os.fdopen(result_fd, "w", encoding="utf-8") as fh:
        fh.write(data)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
