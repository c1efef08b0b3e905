"""Plan migration, the distributed track strategy (Sect. 4.3 of seed 003), on the runtime's plan
generations.

A migration (one *round*) moves every node of the query from generation g to g + 1 at one head
epoch E, agreed by all of them:

1. **Shadow.**  Each node learns the new plan (CNU: the planner's ``PlanUpdate``; DNU: the SEPs in
   the round's LOCAL_READY messages).  The windows it will newly keep are copied to it while the
   old plan runs on (:mod:`.shadow`: snapshot + live batches, deduplicated by tuple id).
2. **LOCAL_READY** (CNU: when its copied windows are full; DNU: when its SEPs are settled) to every
   other node.
3. **GLOBAL_READY** once every LOCAL_READY is in (DNU: and its windows are full).  It carries the
   node's *fence* F: the node inserts no epoch from F on until the switch (F is its next epoch
   plus a margin, so it normally does not wait).  The switch epoch is E = max F over the nodes:
   every node has run the old plan for fewer than E epochs, so none has served a head of E.
4. **Switch** once every GLOBAL_READY is in: the old generation stops after head epoch E − 1, the
   new one is installed from E (:meth:`joinlib.runtime.host.Host.install`), and every replica of
   the new plan at the node is started with the window as E finds it -- from the old replica when
   the node kept that window in both plans (the paper's "make W_j accessible"), from the copied
   window otherwise.  No replica is copied over the network at the switch itself.
5. **Drop.**  When the old generation has finished its epochs, it is retired.

Exactness does not rest on timing: every head tuple is served by exactly one generation (the
old one before E, the new one from E), and each generation's windows hold exactly what its heads
may join.  A node that restarts from a checkpoint redoes the same steps and sends the same
messages again; receivers drop copies.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from joinlib.adaptive.jep import JEP, SEP
from joinlib.adaptive.protocol import Ready
from joinlib.adaptive.shadow import ShadowWindow

#: an adaptive run numbers its plan generations within one block of this many, from its first one (docs/live.md
#: "Replan"): a run that replaces it starts at the next block, apart from every generation the adaptive run can make
ADAPTIVE_GENERATIONS = 1 << 16


def generation_cap(gen: int) -> int:
    """The last plan generation an adaptive run whose generations include ``gen`` may make (its block's last)."""
    return (gen // ADAPTIVE_GENERATIONS + 1) * ADAPTIVE_GENERATIONS - 1


@dataclass
class Generation:
    """A plan generation installed at a node: head epochs ``start`` to ``stop`` (None: open)."""

    gen: int
    jep: JEP
    start: int
    stop: Optional[int] = None

    def data(self) -> list[Any]:
        return [self.gen, self.jep.to_json(), self.start, self.stop]

    @classmethod
    def of(cls, d: list[Any]) -> "Generation":
        return cls(d[0], JEP.from_json(d[1]), d[2], d[3])


@dataclass
class Migration:
    """One round at one node (see the module docstring)."""

    round: int
    triggers: set[int] = field(default_factory=set)
    jep: Optional[JEP] = None          # the new plan, once known
    gen: Optional[int] = None          # the generation it leads to
    noop: bool = False                 # DNU: the round changed no SEP
    local: dict[str, Ready] = field(default_factory=dict)
    glob: dict[str, Ready] = field(default_factory=dict)
    sent_local: bool = False
    sent_global: bool = False
    active: bool = False               # the node's earlier rounds are done: windows set up
    holders: dict[str, ShadowWindow] = field(default_factory=dict)
    requested: bool = False
    switch: Optional[int] = None       # E, once agreed
    injected: set[str] = field(default_factory=set)
    old_gen: Optional[int] = None
    done: bool = False

    def switch_epoch(self, participants: tuple[str, ...]) -> Optional[int]:
        """E = the largest fence, once every node's GLOBAL_READY is in."""
        if any(p not in self.glob for p in participants):
            return None
        return max(r.epoch for r in self.glob.values())

    def full(self) -> bool:
        return all(h.full for h in self.holders.values())

    # ------------------------------------------------------------------ checkpoints
    def snapshot(self) -> dict[str, Any]:
        return {
            "round": self.round, "triggers": sorted(self.triggers),
            "jep": None if self.jep is None else self.jep.to_json(), "gen": self.gen, "noop": self.noop,
            "local": {s: ready_data(r) for s, r in self.local.items()},
            "glob": {s: ready_data(r) for s, r in self.glob.items()},
            "sent": [self.sent_local, self.sent_global, self.active, self.requested, self.done],
            "holders": {s: h.snapshot() for s, h in self.holders.items()},
            "switch": self.switch, "injected": sorted(self.injected), "old_gen": self.old_gen,
        }

    def restore_into(self, data: dict[str, Any], holder: Any) -> None:
        """Fill from :meth:`snapshot`; ``holder(stream)`` makes an empty shadow window."""
        self.triggers = set(data["triggers"])
        self.jep = None if data["jep"] is None else JEP.from_json(data["jep"])
        self.gen, self.noop = data["gen"], data["noop"]
        self.local = {s: ready_of(r) for s, r in data["local"].items()}
        self.glob = {s: ready_of(r) for s, r in data["glob"].items()}
        self.sent_local, self.sent_global, self.active, self.requested, self.done = data["sent"]
        self.holders = {}
        for s, h in data["holders"].items():
            w = holder(s)
            w.restore(h)
            self.holders[s] = w
        self.switch, self.injected, self.old_gen = data["switch"], set(data["injected"]), data["old_gen"]


def ready_data(r: Ready) -> list[Any]:
    return [r.glob, r.epoch, r.digest, [[s.head, list(s.order), list(s.placement)] for s in r.seps],
            list(r.versions), list(r.triggers)]


def ready_of(d: list[Any]) -> Ready:
    seps = tuple(SEP(h, tuple(o), tuple(p)) for h, o, p in d[3])
    return Ready(d[0], d[1], d[2], seps, tuple(d[4]), tuple(d[5]))
