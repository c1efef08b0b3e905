"""The node service: one per site (``python -m services.node --site SITE``)."""
