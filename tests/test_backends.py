"""The solver backends load side by side in one process (as in one harness worker)."""

import subprocess
import sys

import pytest

ORDERS = {
    "highs-first": "import highspy\nfrom ortools.sat.python import cp_model",
    "ortools-first": "from ortools.sat.python import cp_model\nimport highspy",
}


@pytest.mark.parametrize("order", sorted(ORDERS))
def test_highspy_and_ortools_in_one_process(order):
    # a fresh interpreter, since the import order is what matters
    code = ORDERS[order] + """
h = highspy.Highs()
h.setOptionValue("output_flag", False)
m = cp_model.CpModel()
x = m.new_int_var(0, 5, "x")
m.maximize(x)
assert cp_model.CpSolver().solve(m) == cp_model.OPTIMAL
import pulp
p = pulp.LpProblem("t", pulp.LpMinimize)
y = pulp.LpVariable("y", 0, 10, cat="Integer")
p += y
p += y >= 2.5
p.solve(pulp.HiGHS(msg=False))
assert pulp.value(y) == 3
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "ok"
