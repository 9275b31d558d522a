"""spur version [--check] and spur self-update: the CLI side of spur_hpc.release.selfupdate. Without --index they
ask $SPUR_RELEASE_INDEX, else the index of spur.conf's [update] (the one spurctld checks at start)."""

from __future__ import annotations

import os

from spur_hpc.cli.options import Option, help_text, parse
from spur_hpc.cli.runner import CliError

INDEX_ENV = "SPUR_RELEASE_INDEX"
INDEX_OPTIONS = [
    Option(
        "index",
        "",
        "index",
        "LOCATION",
        f"release index: a directory or URL with index.json (default ${INDEX_ENV}, else [update] index)",
    ),
    Option("channel", "", "channel", "NAME", "release channel (default [update] channel, stable)"),
    Option("nightly", "", "nightly", help="the nightly channel (--channel nightly)"),
]
VERSION_OPTIONS = [
    Option("check", "", "check", help="ask the release index whether a newer build exists"),
    *INDEX_OPTIONS,
    Option("help", "h", "help", help="show this help and exit"),
]
UPDATE_OPTIONS = [
    *INDEX_OPTIONS,
    Option("prefix", "", "prefix", "DIR", "install prefix (default: the one this spur runs from, else /opt/spur)"),
    Option("bin_dir", "", "bin-dir", "DIR", "where command links go (default PREFIX/bin)"),
    Option("help", "h", "help", help="show this help and exit"),
]


def update_settings():
    """[update] of spur.conf ($SPUR_CONF or /etc/spur/spur.conf); its defaults on a host without one."""
    from spur_hpc import conf
    from spur_hpc.cli.controller import DEFAULT_CONF_PATH

    path = os.environ.get("SPUR_CONF") or DEFAULT_CONF_PATH
    if not os.path.exists(path):
        return conf.parse("").update
    try:
        return conf.load(path).update  # only [update]: no role's rules (a login node may list no controllers)
    except conf.ConfigError as exc:
        raise CliError(f"{exc} (or pass --index)") from None


def _index_and_channel(values: dict) -> tuple[str, str, str]:
    """-> (index, channel, cache_dir): the cache of [update] only for [update]'s own index."""
    location = values["index"] or os.environ.get(INDEX_ENV, "")
    settings = None if location else update_settings()
    if settings is not None:
        location = settings.index
    if not location:
        raise CliError(
            f"no release index given: pass --index DIR_OR_URL, set {INDEX_ENV}, or set [update] index in spur.conf"
        )
    channel = values["channel"] or (settings.channel if settings else "") or "stable"
    if values["nightly"]:
        channel = "nightly"
    return location, channel, settings.cache_dir if settings else ""


def version_main(argv: list[str], program: str = "spur version") -> int:
    values, positionals = parse(program, VERSION_OPTIONS, argv)
    if values["help"]:
        print(
            help_text(
                program, "[--check] [--index LOCATION] [--channel NAME]", "Show the version and build.", VERSION_OPTIONS
            )
        )
        return 0
    if positionals:
        raise CliError(f"unexpected argument '{positionals[0]}'; see {program} --help")
    from spur_hpc import buildinfo

    print(buildinfo.describe("spur"))
    if not values["check"]:
        return 0
    from spur_hpc.release import selfupdate
    from spur_hpc.release.manifest import ReleaseError

    location, channel, cache_dir = _index_and_channel(values)
    try:
        result = selfupdate.check(location, channel, (buildinfo.version(), buildinfo.build()), cache_dir)
    except ReleaseError as exc:
        raise CliError(f"could not check for updates: {exc}") from None
    for line in result.describe():
        print(line)
    return 0


def self_update_main(argv: list[str], program: str = "spur self-update") -> int:
    values, positionals = parse(program, UPDATE_OPTIONS, argv)
    if values["help"]:
        print(
            help_text(
                program,
                "[--index LOCATION] [--channel NAME] [--prefix DIR] [--bin-dir DIR]",
                "Install the newest release of a channel on this host (daemons are not restarted).",
                UPDATE_OPTIONS,
            )
        )
        return 0
    if positionals:
        raise CliError(f"unexpected argument '{positionals[0]}'; see {program} --help")
    from pathlib import Path

    from spur_hpc.release import install, selfupdate
    from spur_hpc.release.manifest import ReleaseError

    location, channel, _cache = _index_and_channel(values)  # an install always reads the index afresh
    prefix = Path(values["prefix"]) if values["prefix"] else selfupdate.detect_prefix() or Path(install.DEFAULT_PREFIX)
    bin_dir = Path(values["bin_dir"]) if values["bin_dir"] else None
    try:
        result = selfupdate.self_update(location, channel, prefix, bin_dir)
    except ReleaseError as exc:
        raise CliError(f"self-update failed, nothing changed: {exc}") from None
    print(result.message)
    if result.changed:
        print(f"Updated spur to {result.release_id}")
        for line in selfupdate.restart_lines(prefix, result.release_id):
            print(f"Note: {line}")
    return 0
