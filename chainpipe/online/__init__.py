"""Online multi-job planning on a dynamic metro optical network (``docs/online.md``).

Training jobs arrive over time at a metro network of datacenters whose free
GPUs and wavelengths change as jobs and background traffic come and go; a
policy places each job (or lets it wait, then blocks it). The simulation is a
seeded discrete-event run (simpy); every iteration time comes from the one
cost model (:func:`chainpipe.plan.evaluate`).

- :mod:`.scenario`: the scenario format and its validation; :mod:`.presets`: built-in scenarios;
- :mod:`.network`: the graph and its candidate DC chains; :mod:`.traffic`: background;
- :mod:`.jobs`: the job stream; :mod:`.state`: what is free, placements;
- :mod:`.offers`: a job's chain as a chainpipe instance, solved and cached;
- :mod:`.policies`, :mod:`.cba`, :mod:`.gmc_mdp`, :mod:`.forecast`: the policies;
- :mod:`.simulator`: the simpy run; :mod:`.report`: metrics, CSV, Markdown, figures.
"""

from .catalogue import POLICIES
from .presets import PRESETS, preset
from .scenario import Scenario, read_scenario, scenario_from_dict

__all__ = ["POLICIES", "PRESETS", "Scenario", "preset", "read_scenario", "scenario_from_dict"]
