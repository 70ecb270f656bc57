"""Generated gRPC stubs of kiln.v1 (scripts/gen-python-stubs; do not edit)."""
