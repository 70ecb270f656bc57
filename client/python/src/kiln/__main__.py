"""``python -m kiln doctor`` and ``python -m kiln snapshot save|restore|list|show``."""

from __future__ import annotations

import sys

USAGE = """usage: python -m kiln doctor [--json] [--timeout SECS]
       python -m kiln snapshot save|restore|list|show ... (--help for each)"""


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if argv else 2
    if argv[0] == "doctor":
        from .doctor import main as doctor

        return doctor(argv[1:])
    if argv[0] == "snapshot":
        from ._snapshot_cli import main as snapshot

        return snapshot(argv[1:])
    print(f"python -m kiln: unknown command {argv[0]!r} (try: doctor, snapshot)", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
