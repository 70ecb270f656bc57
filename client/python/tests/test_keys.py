"""The key schema's test vectors (proto/testdata/key-vectors.json), computed in Python."""

import json

from harness import REPO

from kiln import keys

VECTORS = json.loads((REPO / "proto" / "testdata" / "key-vectors.json").read_text())


def test_the_vectors_are_the_schema_this_module_writes() -> None:
    assert VECTORS["schema"] == keys.KEY_SCHEMA
    assert VECTORS["blob_keys"] and VECTORS["kernel_keys"] and VECTORS["graph_keys"]


def test_blob_keys() -> None:
    for v in VECTORS["blob_keys"]:
        assert keys.blob_key(v["namespace"], v["tool_version"], v["caller_key"]) == v["key"], v


def test_kernel_keys() -> None:
    for v in VECTORS["kernel_keys"]:
        got = keys.kernel_key(
            v["toolchain"],
            v["fingerprint"],
            v["target"],
            v["source"],
            v["options"],
            [(name, content) for name, content in v["headers"]],
            v["entries"],
        )
        assert got == v["key"], v


def test_graph_keys() -> None:
    for v in VECTORS["graph_keys"]:
        assert keys.graph_key(v["target"], [(i, k) for i, k in v["kernels"]]) == v["key"], v


def test_header_order_does_not_matter_but_option_order_does() -> None:
    fp = "01" * 32
    a = keys.kernel_key("nvrtc", fp, "sm_90", "s", ["-a", "-b"], [("x.h", "1"), ("y.h", "2")], ["k"])
    b = keys.kernel_key("nvrtc", fp, "sm_90", "s", ["-a", "-b"], [("y.h", "2"), ("x.h", "1")], ["k"])
    c = keys.kernel_key("nvrtc", fp, "sm_90", "s", ["-b", "-a"], [("x.h", "1"), ("y.h", "2")], ["k"])
    assert a == b != c


def test_the_stored_key_of_a_put_is_the_blob_key(client) -> None:
    stored = client.put_blob("python-keys", "1", b"caller key", b"data")
    assert stored == keys.blob_key("python-keys", "1", b"caller key")
