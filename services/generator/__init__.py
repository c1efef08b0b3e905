"""Synthetic live events for the json sources of a query (``python -m services.generator``)."""
