"""What every joinlib command line shares: run the chosen command with one error handling.

A user mistake (:class:`~joinlib.errors.JoinlibError`) prints one ``error: ...`` line and
exits with status 2; a traceback means a bug in joinlib.  Used by ``joinlib`` (:mod:`joinlib.cli.main`)
and ``python -m joinlib.experiments`` (:mod:`joinlib.cli.experiments`).
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Optional

from joinlib.errors import JoinlibError

Command = Callable[[argparse.Namespace], Optional[int]]


def run(parser: argparse.ArgumentParser, argv: Optional[Sequence[str]] = None) -> int:
    """Parse ``argv`` and run the command it names (``set_defaults(func=...)``); the exit status."""
    args = parser.parse_args(argv)
    func: Optional[Command] = getattr(args, "func", None)
    if not func:
        parser.print_help()
        return 2
    try:
        return func(args) or 0
    except JoinlibError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
