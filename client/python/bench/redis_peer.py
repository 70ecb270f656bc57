"""Triton 3.6.0's own ``RedisRemoteCacheBackend`` with only its construction bug patched.

Upstream's constructor reads ``knobs.cache.redis``, which does not exist in Triton 3.6.0, so it
raises AttributeError before it ever talks to Redis. This subclass sets the three attributes
that constructor would have set (the Redis connection and the key format) from the environment,
and inherits ``get``/``put`` unchanged: every process that misses compiles by itself, and each
file is its own Redis key.

Environment: ``KILN_PEER_REDIS_SOCKET`` (a unix socket path) or ``KILN_PEER_REDIS_HOST`` and
``KILN_PEER_REDIS_PORT``; ``KILN_PEER_REDIS_KEY_FORMAT`` (default ``triton:{key}:{filename}``).
"""

from __future__ import annotations

import os

import redis
from triton.runtime.cache import RedisRemoteCacheBackend


class PatchedRedisRemoteCacheBackend(RedisRemoteCacheBackend):
    def __init__(self, key: str) -> None:
        self._key = key
        self._key_fmt = os.environ.get("KILN_PEER_REDIS_KEY_FORMAT", "triton:{key}:{filename}")
        socket = os.environ.get("KILN_PEER_REDIS_SOCKET")
        if socket:
            self._redis = redis.Redis(unix_socket_path=socket)
        else:
            host = os.environ.get("KILN_PEER_REDIS_HOST", "localhost")
            self._redis = redis.Redis(host=host, port=int(os.environ.get("KILN_PEER_REDIS_PORT", "6379")))
