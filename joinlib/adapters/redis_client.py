"""Connecting to Redis and naming and deleting joinlib's keys there: the helpers every Redis adapter shares
(window stores, checkpoints, the progressive commands' pages).

Why apart from :mod:`joinlib.adapters.redis_store`: the checkpoints and the progressive pages need a client
and the key namespace, not the window store.
"""
from __future__ import annotations

import redis
import redis.connection

from joinlib.settings import RedisSecurity

__all__ = ["redis_client", "store_prefix", "clear_namespace", "glob_escape", "unlink_matching", "tagged_base",
           "index_spec", "require_bytes_client"]


#: an argument longer than this goes to the socket as it is, not copied into the packed command
BIG_ARG = 6000
#: commands with more arguments than this are looked at for big ones (shorter ones: hiredis packs them)
_MANY_ARGS = 4


class BlockPacker:
    """redis-py's command packer for joinlib's clients: hiredis packs ordinary commands (as redis-py does), but a
    command carrying big byte strings -- a window flush's ``HSET`` of epoch blocks, tens of kB each -- is packed
    as a list of chunks in which each big argument is itself, not a copy: ``hiredis.pack_command`` copies every
    byte at ~230 MB/s, which made packing a flush cost more CPU than encoding its blocks (redis-py's connection
    sends the chunks in turn, as it does for its pure-Python packer's)."""

    def __init__(self, encode) -> None:
        from redis.connection import HiredisRespSerializer, PythonRespSerializer
        from redis.utils import HIREDIS_AVAILABLE
        self._small = HiredisRespSerializer() if HIREDIS_AVAILABLE else PythonRespSerializer(BIG_ARG, encode)
        self._encode = encode

    def pack(self, *args) -> list:
        if len(args) <= _MANY_ARGS or not isinstance(args[0], str) or " " in args[0]:
            return self._small.pack(*args)
        encode = self._encode
        out: list = []
        buf = [b"*%d\r\n" % len(args)]
        for a in args:
            t = type(a)
            b = a if t is bytes else b"%d" % a if t is int else encode(a)
            n = len(b)
            if n > BIG_ARG:
                buf.append(b"$%d\r\n" % n)
                out.append(b"".join(buf))
                out.append(b)
                buf = [b"\r\n"]
            else:
                buf += (b"$%d\r\n" % n, b, b"\r\n")
        out.append(b"".join(buf))
        return out


class BlockConnection(redis.connection.Connection):
    """A redis-py TCP connection packing with :class:`BlockPacker`."""

    def __init__(self, *a, **kw) -> None:
        super().__init__(*a, **kw)
        self._command_packer = BlockPacker(self.encoder.encode)


class BlockSSLConnection(redis.connection.SSLConnection):
    """A redis-py TLS connection packing with :class:`BlockPacker`."""

    def __init__(self, *a, **kw) -> None:
        super().__init__(*a, **kw)
        self._command_packer = BlockPacker(self.encoder.encode)


_BLOCK = {redis.connection.Connection: BlockConnection, redis.connection.SSLConnection: BlockSSLConnection}


def redis_client(url: str, **client_kwargs):
    """A redis-py client for ``url`` with the ACL user, password and TLS CA of the environment
    (:class:`joinlib.settings.RedisSecurity`, docs/security.md); explicit keyword arguments win.  Its connections
    pack commands with :class:`BlockPacker` (big arguments not copied)."""
    for k, v in RedisSecurity.from_env().client_kwargs(url).items():
        client_kwargs.setdefault(k, v)
    client = redis.Redis.from_url(url, **client_kwargs)
    pool = client.connection_pool
    cls = _BLOCK.get(pool.connection_class)   # not a unix socket's, nor a caller's own
    if cls is not None:
        pool.connection_class = cls
    return client


def store_prefix(namespace: str, name: str) -> str:
    """``{namespace/site}/rest`` for a store name ``site/rest`` (all of a node's stores share a slot)."""
    site, _, rest = name.partition("/")
    return "{" + namespace + "/" + site + "}" + ("/" + rest if rest else "")


def tagged_base(prefix: str) -> str:
    """The base of a store's keys: ``prefix`` itself if it holds a hash tag ``{...}``, else ``{prefix}`` (a
    store's keys must share a cluster slot: its scripts and transactions touch several at once)."""
    i = prefix.find("{")
    return prefix if i >= 0 and prefix.find("}", i + 2) > i else "{" + prefix + "}"


def index_spec(index: tuple[int, ...]) -> str:
    """An index (positions in ``Tup.key``) as stored in a store's index set: ``"0"``, ``"0,2"``."""
    return ",".join(str(int(i)) for i in index)


def require_bytes_client(client, who: str) -> None:
    """Refuse a client that decodes replies: the stores keep binary blobs."""
    try:
        decoded = client.get_connection_kwargs().get("decode_responses")
    except Exception:  # pragma: no cover - client types without connection kwargs
        decoded = False
    if decoded:
        raise ValueError(f"{who} needs a client with decode_responses=False")


def glob_escape(s: str) -> str:
    """``s`` as a literal in a Redis ``MATCH`` / ``KEYS`` pattern."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in s)


def unlink_matching(client, patterns: list[str]) -> int:
    """Delete every key matching one of ``patterns`` (SCAN, then UNLINK in batches); return how many."""
    n = 0
    for pat in patterns:
        batch = []
        for k in client.scan_iter(match=pat, count=1000):
            batch.append(k)
            if len(batch) >= 500:
                n += client.unlink(*batch)
                batch = []
        if batch:
            n += client.unlink(*batch)
    return n


def clear_namespace(client, namespace: str) -> int:
    """Delete every key of every store made by ``redis_store_factory(..., namespace)``; return how many.

    (Also those of a namespace ``namespace/...``: keep namespaces from being such prefixes.)
    """
    ns = glob_escape(namespace)
    return unlink_matching(client, ["{" + ns + "/*", "{" + ns + "}*"])
