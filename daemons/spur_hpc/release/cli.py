"""spur-release: build, publish, install, roll back and inspect releases. Every path is an option."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from spur_hpc import buildinfo
from spur_hpc.release.manifest import ReleaseError

PROGRAM = "spur-release"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, like every other Spur command
        print(f"{self.prog}: error: {message}; run '{self.prog} --help' for the options", file=sys.stderr)
        sys.exit(2)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=PROGRAM, description="Build, publish, install and roll back Spur releases.")
    parser.add_argument("--version", action="version", version=buildinfo.describe(PROGRAM))
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    commands.required = True

    build = commands.add_parser("build", help="build a release directory (wheel, wheelhouse, release.json, sums)")
    build.add_argument("--out", required=True, type=Path, help="release directory to create (must not exist)")
    build.add_argument("--version", help="release version (default: the source tree's __version__)")
    build.add_argument("--source", type=Path, default=Path.cwd(), help="source tree (default: the current directory)")
    build.add_argument(
        "--find-links",
        action="append",
        default=[],
        metavar="DIR",
        help="extra place pip looks for dependency wheels (repeatable)",
    )
    build.add_argument("--no-index", action="store_true", help="fetch dependencies from --find-links only (offline)")
    build.add_argument("--python", default=sys.executable, help="interpreter that builds (default: this one)")

    install = commands.add_parser("install", help="install a release directory into a prefix and switch to it")
    install.add_argument("release", type=Path, help="release directory")
    install.add_argument("--prefix", type=Path, default=Path("/opt/spur"), help="install prefix (default /opt/spur)")
    install.add_argument("--bin-dir", type=Path, help="where command links go (default PREFIX/bin)")
    install.add_argument("--python", help="interpreter for the release venv (default: this Python's base)")

    rollback = commands.add_parser("rollback", help="make the previous release current again")
    rollback.add_argument("--prefix", type=Path, default=Path("/opt/spur"), help="install prefix (default /opt/spur)")

    status = commands.add_parser("status", help="show current, previous and installed releases")
    status.add_argument("--prefix", type=Path, default=Path("/opt/spur"), help="install prefix (default /opt/spur)")
    status.add_argument("-o", "--output", choices=["text", "json"], default="text", help="output format")

    verify = commands.add_parser("verify", help="check a release directory against its SHA256SUMS")
    verify.add_argument("release", type=Path, help="release directory")

    publish = commands.add_parser("publish", help="add a release to a release index directory")
    publish.add_argument("release", type=Path, help="release directory")
    publish.add_argument("--index", required=True, type=Path, help="index directory (holds index.json)")
    publish.add_argument("--channel", default="stable", help="channel to list it in (default stable)")
    return parser


def run(args: argparse.Namespace) -> int:
    if args.command == "build":
        from spur_hpc.release.build import build_release

        build_release(args.source, args.out, args.version, args.find_links, args.no_index, args.python)
        return 0
    if args.command == "install":
        from spur_hpc.release import install, processes

        result = install.install_release(args.release, args.prefix, args.bin_dir, args.python)
        print(result.message)
        if result.changed:
            for line in processes.restart_advice(args.prefix, result.release_id):
                print(f"note: {line}")
        return 0
    if args.command == "rollback":
        from spur_hpc.release import install, processes

        _from, to = install.rollback(args.prefix)
        for line in processes.restart_advice(args.prefix, to):
            print(f"note: {line}")
        return 0
    if args.command == "status":
        from spur_hpc.release import install

        state = install.status(args.prefix)
        if args.output == "json":
            print(json.dumps(state, indent=2))
        else:
            print(f"prefix:   {state['prefix']}")
            print(f"current:  {state['current'] or '(none)'}")
            print(f"previous: {state['previous'] or '(none)'}")
            for release in state["releases"]:  # type: ignore[union-attr]
                print(f"  {release['id']}{'' if release['complete'] else '  (incomplete)'}")
        return 0
    if args.command == "verify":
        from spur_hpc.release.manifest import verify

        info = verify(args.release)
        print(f"{args.release}: release {info.release_id} verified")
        return 0
    if args.command == "publish":
        from spur_hpc.release.index import publish

        info, changed = publish(args.release, args.index, args.channel)
        print(
            f"{'published' if changed else 'already listed:'} {info.release_id} on channel {args.channel} of "
            f"{args.index}"
        )
        return 0
    raise AssertionError(args.command)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return run(args)
    except ReleaseError as exc:
        print(f"{PROGRAM}: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
