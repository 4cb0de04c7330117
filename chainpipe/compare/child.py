"""The child process of one run: ``python -m chainpipe.compare.child RESULT_FILE``.

Reads the run's specification (JSON) on stdin, rebuilds the instance, imports
the solver function named by ``target`` (``module:function``), runs it and
turns its :class:`~chainpipe.result.Outcome` into a
:class:`~chainpipe.result.Result` with :func:`chainpipe.solve.finish` (which
re-evaluates the plan with the one cost model). The result is written to
``RESULT_FILE``; a solver's exception becomes an ``error`` result. The solve
time covers the solver call only, as in :func:`chainpipe.solve.solve`.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import time
import traceback


def main(out_path: str) -> int:
    spec = json.loads(sys.stdin.read())
    from ..io import instance_from_dict
    from ..result import Result
    from ..solve import finish

    instance = instance_from_dict(spec["instance"])
    module, func = spec["target"].split(":")
    run = None
    try:
        run = getattr(importlib.import_module(module), func)
    except Exception as exc:
        traceback.print_exc()
        result = Result(instance.name, spec["solver"], "error", None, None, None, 0.0,
                        f"cannot load solver {spec['target']}: {type(exc).__name__}: {exc}")
    if run is not None:
        start = time.perf_counter()
        try:
            outcome = run(instance, time_limit=spec["time_limit"], seed=spec["seed"],
                          threads=spec["threads"], **spec.get("options", {}))
            result = finish(instance, spec["solver"], outcome, time.perf_counter() - start)
        except Exception as exc:
            elapsed = time.perf_counter() - start
            traceback.print_exc()
            message = f"{type(exc).__name__}: {exc}".splitlines()[0]
            result = Result(instance.name, spec["solver"], "error", None, None, None, elapsed,
                            message)
    data = json.dumps(result.to_dict(), allow_nan=False)
    tmp = out_path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(data)
    os.replace(tmp, out_path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))
