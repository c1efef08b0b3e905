"""What an adaptive run is configured with, and the ``adaptive[:cnu|:dnu]`` plan name."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional

from joinlib.adaptive.jep import JEP
from joinlib.adaptive.planner import Eq12, PlanLevel
from joinlib.adaptive.stats import MonitorConfig, StreamStatistics
from joinlib.errors import JoinlibError
from joinlib.runtime.sensor import Sensor

MODES = ("cnu", "dnu")
PLAN_NAME = "adaptive"


@dataclass(frozen=True)
class AdaptiveConfig:
    """``mode``: centralised (``cnu``, the default) or distributed (``dnu``) re-planning;
    ``monitor``: measurement interval, threshold and hysteresis (:mod:`.stats`);
    ``fence_margin``: epochs between a node's GLOBAL_READY and its fence (it waits at the fence
    only if the switch epoch is not agreed by then: raise it where messages take longer than
    margin × τ); ``planner``: the CNU query node (default: the first stream's site); ``model``:
    how Algorithm 1 prices a plan (:class:`~.planner.PlanLevel`, the default: Eq. 1/2 with each
    window replica and message charged once, as the runtime ships them; :class:`~.planner.Eq12`:
    the paper's Eq. 1/2 per step)."""

    mode: str = "cnu"
    monitor: MonitorConfig = field(default_factory=MonitorConfig)
    fence_margin: int = 1
    planner: Optional[str] = None
    model: Eq12 = field(default_factory=PlanLevel)

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise JoinlibError(f"adaptive: unknown mode {self.mode!r} (choose from {', '.join(MODES)})")
        if self.fence_margin < 0:
            raise JoinlibError("adaptive: the fence margin is 0 epochs or more")


def is_adaptive(spec: str) -> bool:
    """Does a ``--plan`` value ask for adaptive re-planning?"""
    return spec == PLAN_NAME or spec.startswith(PLAN_NAME + ":")


def parse_plan(spec: str, base: Optional[AdaptiveConfig] = None) -> AdaptiveConfig:
    """``adaptive`` or ``adaptive:cnu`` / ``adaptive:dnu`` -> the configuration."""
    _, colon, mode = spec.partition(":")
    if not colon:
        mode = "cnu"
    if mode not in MODES:
        raise JoinlibError(f"--plan {spec!r}: expected adaptive, adaptive:cnu or adaptive:dnu")
    b = base or AdaptiveConfig()
    return AdaptiveConfig(mode, b.monitor, b.fence_margin, b.planner, b.model)


class AdaptiveSensor(Sensor):
    """The runtime's sensor interface with the adaptive framework's hooks (no-ops here; the
    Prometheus adapter and the embedded report implement them)."""

    def on_stream_stats(self, site: str, query: str, epoch: int, stats: StreamStatistics) -> None: ...
    def on_trigger(self, site: str, query: str, epoch: int, stats: StreamStatistics) -> None: ...
    def on_plan_change(self, site: str, query: str, gen: int, epoch: int, jep: JEP,
                       triggers: tuple[int, ...]) -> None: ...
    def on_protocol(self, site: str, kind: str, category: str) -> None: ...


def adaptive_sensor(sensor: Optional[Sensor]) -> AdaptiveSensor:
    return sensor if isinstance(sensor, AdaptiveSensor) else AdaptiveSensor()


def trigger_line(site: str, query: str, epoch: int, stats: StreamStatistics) -> str:
    """The log line of a statistics change past the threshold (``on_trigger``)."""
    sel = ", ".join(f"f({a}) {f:.4g}" for a, f in stats.selectivity)
    return (f"adaptive {query}: {stats.stream} at {site} changed past the threshold at epoch {epoch}: "
            f"rate {stats.rate:.4g}/s, tuple {stats.tuple_bytes:.0f} B, window {stats.window:.4g}"
            + (f", {sel}" if sel else "") + " -> re-planning")


def change_line(site: str, query: str, gen: int, epoch: int, jep: JEP, triggers: tuple[int, ...]) -> str:
    """The log line of a node switching to a new plan (``on_plan_change``); ``S<``: joined at the
    source, ``S>``: at the stream's node, as ``joinlib run`` prints plans."""
    plan = "; ".join(f"{s.head}: " + " ".join(f"{o}{'<>'[p]}" for o, p in zip(s.order, s.placement, strict=True))
                     for s in jep.seps)
    return (f"adaptive {query}: {site} switched to plan generation {gen} from head epoch {epoch} "
            f"(triggers {', '.join(map(str, triggers)) or '-'}): {plan}")


class LogSensor(AdaptiveSensor):
    """Writes a line per trigger and per plan switch to ``log`` (the caller decides where: stderr,
    a service's log); measurements and protocol messages are metrics, not log lines."""

    def __init__(self, log: Callable[[str], None]) -> None:
        self.log = log

    def on_trigger(self, site: str, query: str, epoch: int, stats: StreamStatistics) -> None:
        self.log(trigger_line(site, query, epoch, stats))

    def on_plan_change(self, site: str, query: str, gen: int, epoch: int, jep: JEP,
                       triggers: tuple[int, ...]) -> None:
        self.log(change_line(site, query, gen, epoch, jep, triggers))

