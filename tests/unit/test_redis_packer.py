"""joinlib's Redis connections pack commands with BlockPacker: the bytes on the wire are redis-py's own."""
from __future__ import annotations

import pytest

pytest.importorskip("redis")

from redis._parsers import Encoder  # noqa: E402
from redis.connection import PythonRespSerializer  # noqa: E402

from joinlib.adapters.redis_client import BIG_ARG, BlockConnection, BlockPacker, redis_client  # noqa: E402


@pytest.mark.parametrize("args", [
    ("GET", "k"),
    ("CONFIG GET", "maxmemory"),
    ("HSET", "k", 1, b"x", 2, b"y" * (BIG_ARG + 1), 3, "abc\u00e9", 4.5, b""),
    ("HDEL", "k", *range(300)),
    ("EVALSHA", "abc", 1, "{t}", b"z" * (3 * BIG_ARG), b"", "fence", b"q" * BIG_ARG),
    ("HSET", "k", *[x for i in range(40) for x in (i, bytes([i % 256]) * (BIG_ARG + i))]),
])
def test_same_bytes_as_redis_py(args: tuple) -> None:
    enc = Encoder("utf-8", "strict", False)
    got = b"".join(BlockPacker(enc.encode).pack(*args))
    want = b"".join(PythonRespSerializer(BIG_ARG, enc.encode).pack(*args))
    assert got == want


def test_big_arguments_are_not_copied() -> None:
    big = b"b" * (BIG_ARG + 10)
    chunks = BlockPacker(Encoder("utf-8", "strict", False).encode).pack("HSET", "k", 1, big, 2, big)
    assert sum(c is big for c in chunks) == 2


def test_bad_arguments_still_refused() -> None:
    from redis.exceptions import DataError
    with pytest.raises(DataError):
        BlockPacker(Encoder("utf-8", "strict", False).encode).pack("HSET", "k", 1, True, 2, b"x")


def test_clients_use_it() -> None:
    assert redis_client("redis://127.0.0.1:1/0").connection_pool.connection_class is BlockConnection
