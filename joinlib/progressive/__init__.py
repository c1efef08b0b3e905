"""Progressive joins of two finite relations under a memory limit (seed 004: RPJ, Tao et al.,
SIGMOD 2005; XJoin and HMJ as baselines).

Results come out while the relations arrive - from memory when a tuple arrives, from
memory x disk and disk x disk work while the inputs stall, the rest in a clean-up -
each exactly once.  Layout:

* :mod:`.model` - tuples, :class:`JoinSpec`, :class:`PageCosts`, the injected :class:`VirtualClock`;
* :mod:`.memory`, :mod:`.disk`, :mod:`.runs` - partitioned memory, disk partitions as slots of
  sorted runs, the :class:`~.runs.RunStore` protocol (memory, files; Redis in ``joinlib.adapters``);
* :mod:`.base` (the interface: arrival, blocked, clean-up), :mod:`.tasks` (md-, dd-tasks,
  duplicate avoidance), :mod:`.stats` (Lemma 1), :mod:`.rpj`, :mod:`.xjoin`, :mod:`.hmj`;
* :mod:`.sim` (virtual-time simulator), :mod:`.sources`, :mod:`.cli`, :mod:`.experiment`.

No module here imports a Kafka or Redis client (see ``joinlib.adapters.progressive_*``).
docs/progressive.md explains the algorithms and the measured figures.
"""
from joinlib.progressive.base import ProgressiveJoin
from joinlib.progressive.model import DiskTuple, JoinSpec, MemTuple, PageCosts, PairSink, SpecError, VirtualClock
from joinlib.progressive.registry import ALGORITHMS, make_join
from joinlib.progressive.runs import FileRunStore, MemoryRunStore, RunStore
from joinlib.progressive.sim import ArrivalNetwork, Recorder, Workload, schedule, simulate

__all__ = ["ALGORITHMS", "ArrivalNetwork", "DiskTuple", "FileRunStore", "JoinSpec", "MemTuple", "MemoryRunStore",
           "PageCosts", "PairSink", "ProgressiveJoin", "Recorder", "RunStore", "SpecError", "VirtualClock", "Workload",
           "make_join", "schedule", "simulate"]
