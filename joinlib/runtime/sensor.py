"""What the runtime reports about itself; adapters turn it into Prometheus metrics."""
from __future__ import annotations

from collections import defaultdict


class Sensor:
    """No-op base: the core calls these hooks, never a metrics library."""

    def on_input(self, site: str, stream: str, n: int) -> None: ...
    def on_phase(self, site: str, operator: str, seconds: float) -> None: ...
    def on_emit(self, site: str, n: int) -> None: ...
    def on_late(self, site: str, kind: str) -> None: ...
    def on_window(self, site: str, stream: str, store: str, size: int) -> None: ...


class TotalsSensor(Sensor):
    """Accumulates totals in memory (embedded mode's report)."""

    def __init__(self) -> None:
        self.inputs: dict[tuple[str, str], int] = defaultdict(int)
        self.processing: dict[tuple[str, str], float] = defaultdict(float)
        self.emitted: dict[str, int] = defaultdict(int)
        self.late: dict[tuple[str, str], int] = defaultdict(int)

    def on_input(self, site: str, stream: str, n: int) -> None:
        self.inputs[(site, stream)] += n

    def on_phase(self, site: str, operator: str, seconds: float) -> None:
        self.processing[(site, operator)] += seconds

    def on_emit(self, site: str, n: int) -> None:
        self.emitted[site] += n

    def on_late(self, site: str, kind: str) -> None:
        self.late[(site, kind)] += 1
