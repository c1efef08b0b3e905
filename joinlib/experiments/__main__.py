"""``python -m joinlib.experiments ...``: the experiment, stats and calibrate commands alone."""
import sys

from .cli import main

sys.exit(main())
