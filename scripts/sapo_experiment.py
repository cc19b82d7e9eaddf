"""The SAPO experiment: tune, verdict, control, report (`python scripts/sapo_experiment.py --help`).

Everything lives in `swarm.bench.sapo_cli` (the commands and the plan of units),
`swarm.bench.sapo_units` (one unit) and `swarm.bench.sapo_report`; docs/SAPO.md explains the
studies.
"""

import sys

from swarm.bench.sapo_cli import main

if __name__ == "__main__":
    sys.exit(main())
