"""Deterministic simulated network: the embedded mode's transport."""
from .network import LinkStats, SimNetwork

__all__ = ["LinkStats", "SimNetwork"]
