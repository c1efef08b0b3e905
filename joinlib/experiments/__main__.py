"""``python -m joinlib.experiments ...``: the experiment, stats and calibrate commands alone."""
import sys

from joinlib.cli.experiments import main

sys.exit(main())
