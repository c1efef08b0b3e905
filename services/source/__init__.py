"""The source service: replays stream files into ``src.<query>.<stream>`` (``python -m services.source``)."""
