"""Every command of ``joinlib``: the parser, the run/plan/gen commands and each seed's experiment commands."""
