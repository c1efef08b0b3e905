"""Deterministic simulated network: the embedded mode's transport."""
from joinlib.sim.network import LinkStats, SimNetwork

__all__ = ["LinkStats", "SimNetwork"]
