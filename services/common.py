"""What the services share: error and info lines, and ``env`` for the Spark jobs' settings (every other
variable a service reads is in :class:`joinlib.settings.ServiceEnv`, read once at its entry point)."""
from __future__ import annotations

import sys
from typing import Optional, overload

from joinlib.settings import env_value

__all__ = ["env", "error_line", "info_line"]


@overload
def env(name: str) -> Optional[str]: ...
@overload
def env(name: str, default: str) -> str: ...
def env(name: str, default: Optional[str] = None) -> Optional[str]:
    """``$name`` stripped, or ``default`` when it is unset or blank."""
    return env_value(name, default)


def error_line(msg: str) -> None:
    print(f"error: {msg}", file=sys.stderr, flush=True)


def info_line(prefix: str, msg: str) -> None:
    print(f"[{prefix}] {msg}", file=sys.stderr, flush=True)
