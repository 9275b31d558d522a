"""Print an existing spur.conf as JSON: its text cut into top-level TOML sections, each kept verbatim.

The spur_conf role rewrites only the sections its caller owns; every other section (site-local [x-*] tables,
sections of a newer release, the other daemon's section on a host that runs both) must come back byte for
byte, comments included. Parsing into data and writing TOML again would lose comments and formatting, so the
file is cut at its table headers instead; tomllib checks first that the file is valid TOML, so the cut never
has to guess.

The parsed values come along ("data", dates as text) so that the caller can tell which sections a rewrite
changes in value (a [partitions.NAME] table takes a reload, other sections a restart) and which sub-tables of
a section ([partitions.debug]) the file already has, however they are written.

Usage: spur_conf_sections.py PATH
  ->  {"exists", "text", "preamble", "sections": [{"name", "text"}], "data", "error"}
"""

import json
import re
import sys

try:
    import tomllib
except ImportError:  # Python < 3.11: the release's own interpreter is 3.11+, so this is a host without it
    tomllib = None

# A table header: [name], [name.sub], [[name]], with bare or quoted keys; the first key is the section.
HEADER = re.compile(r"""^\s*\[\[?\s*(?P<name>"[^"]*"|'[^']*'|[A-Za-z0-9_-]+)""")
TRIPLE_QUOTES = ('"""', "'''")


def first_key(match):
    name = match.group("name")
    return name[1:-1] if name[0] in "\"'" else name


def cut(text, top_level_names):
    """-> (preamble, [{"name", "text"}]) with "".join of all parts == text."""
    preamble, sections, current = [], [], None
    open_string = None  # the triple quote of a multi-line string we are inside, if any
    for line in text.splitlines(keepends=True):
        match = HEADER.match(line) if open_string is None else None
        if match and first_key(match) in top_level_names:
            name = first_key(match)
            if current is None or current["name"] != name:
                current = {"name": name, "text": ""}
                sections.append(current)
        if current is None:
            preamble.append(line)
        else:
            current["text"] += line
        open_string = track_multiline(line, open_string)
    return "".join(preamble), sections


def track_multiline(line, open_string):
    """Follow multi-line strings so that a '[' line inside one is never taken for a header."""
    position = 0
    while True:
        if open_string is None:
            found = [(line.find(q, position), q) for q in TRIPLE_QUOTES if line.find(q, position) >= 0]
            comment = line.find("#", position)
            if not found:
                return None
            start, quote = min(found)
            if 0 <= comment < start:
                return None
            open_string, position = quote, start + 3
        else:
            end = line.find(open_string, position)
            if end < 0:
                return open_string
            open_string, position = None, end + 3


def main():
    path = sys.argv[1]
    result = {"exists": False, "text": "", "preamble": "", "sections": [], "data": {}, "error": None}
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except FileNotFoundError:
        print(json.dumps(result))
        return 0
    except (OSError, UnicodeDecodeError) as exc:
        result.update(exists=True, error="cannot read %s (%s)" % (path, exc))
        print(json.dumps(result))
        return 0
    result.update(exists=True, text=text)
    if tomllib is None:
        result["error"] = "Python %d.%d has no tomllib; run this with Python 3.11+" % sys.version_info[:2]
    else:
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            result["error"] = "%s is not valid TOML (%s)" % (path, exc)
        else:
            result["preamble"], result["sections"] = cut(text, set(data))
            result["data"] = data
    print(json.dumps(result, default=str))  # TOML dates and times are the only values JSON lacks
    return 0


if __name__ == "__main__":
    sys.exit(main())
