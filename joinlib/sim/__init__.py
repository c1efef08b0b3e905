"""Deterministic simulated network: the embedded mode's transport."""
from joinlib.sim.network import SimNetwork

__all__ = ["SimNetwork"]
