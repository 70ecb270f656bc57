"""The shape of torch 2.11's torch/_inductor/remote_cache.py: a controller (RemoteCache) over a
serde and a bytes backend (RemoteCacheBackend with _get/_put), Redis-backed classes per cache,
and create_cache, which looks the open-source class up by name in this module on every call."""

import json
import sys


class RemoteCacheBackend:
    def __init__(self):
        self._name = f"backend:{type(self).__name__}"

    def _get(self, key):
        raise NotImplementedError

    def _put(self, key, data):
        raise NotImplementedError

    def get(self, key):
        return self._get(key)

    def put(self, key, data):
        self._put(key, data)


class RemoteCacheJsonSerde:
    def encode(self, data):
        return bytes(json.dumps(data), "ascii")

    def decode(self, data):
        return json.loads(data)


class RemoteCache:
    backend_override_cls = None

    def __init__(self, backend, serde):
        self.backend = backend
        self.serde = serde

    def get(self, key):
        data = self.backend.get(key)
        return self.serde.decode(data) if data else None

    def put(self, key, value):
        assert value is not None
        self.backend.put(key, self.serde.encode(value))


class RedisRemoteCache(RemoteCache):
    def __init__(self, cache_id):
        raise RuntimeError("redis not available but required for remote cache")


class RemoteAutotuneCache(RedisRemoteCache):
    pass


class RemoteBundledAutotuneCache(RedisRemoteCache):
    pass


class RemoteFxGraphCache(RedisRemoteCache):
    pass


class RemoteAOTAutogradCache(RedisRemoteCache):
    pass


class RemoteDynamoPGOCache(RedisRemoteCache):
    pass


def create_cache(key, is_fbcode, fb_cache_cls, oss_cache_cls):
    try:
        return getattr(sys.modules[__name__], oss_cache_cls)(key)
    except Exception:
        return None
