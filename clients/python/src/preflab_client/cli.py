"""`preflab`, the client's command line: `preflab sync [DIR ...]` sends offline runs (preflab_client.offline) to
the server of PREFLAB_URL with the token PREFLAB_TOKEN; with no DIR, every offline run under the outbox directory
(PREFLAB_OUTBOX_DIR, else ~/.cache/preflab/outbox)."""

from __future__ import annotations

import argparse
import sys

from preflab_client.client import Client
from preflab_client.http import ApiError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="preflab", description="Preflab's Python client")
    commands = parser.add_subparsers(dest="command", required=True)
    sync = commands.add_parser("sync", help="send offline runs (PREFLAB_MODE=offline) to the server")
    sync.add_argument("paths", nargs="*", help="a run's directory, or a directory of them (default: all)")
    arguments = parser.parse_args(argv)
    try:
        with Client() as client:
            results = [result for path in (arguments.paths or [None]) for result in client.sync_offline(path)]
    except (ApiError, ValueError, OSError) as error:
        print(f"preflab sync: {error}", file=sys.stderr)
        return 1
    if not results:
        print("preflab sync: no offline runs found")
    for result in results:
        print(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
