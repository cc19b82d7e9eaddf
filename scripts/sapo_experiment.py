"""The SAPO experiment: tune, verdict, control, report (`python scripts/sapo_experiment.py --help`).

Everything lives in `lab.sapo_cli` (the commands and the plan of units),
`lab.sapo_units` (one unit) and `lab.sapo_report`; docs/studies/ explains the
studies.
"""

import sys

from lab.sapo_cli import main

if __name__ == "__main__":
    sys.exit(main())
