"""A small getopt_long-style parser for the Slurm commands.

argparse costs about 7 ms to import and its messages are not Slurm's; the commands need short and long
options, `--opt=value`, `-ovalue`, bundled short flags, unique long prefixes and `--`, nothing more.
"""

from __future__ import annotations

from spur_hpc.cli.runner import CliError, printable

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


class Option:
    """short: one letter without the dash; long: without the dashes; value: the metavar (empty: a flag);
    repeat: collect every occurrence in a list; optional: the value may be left out (getopt's optional argument:
    only `--opt=value` or `-oVALUE` give one), and const is stored then, as it is for a flag.
    (A plain class: dataclasses costs ~5 ms to import.)"""

    __slots__ = ("dest", "short", "long", "value", "help", "repeat", "optional", "const")

    def __init__(
        self,
        dest: str,
        short: str = "",
        long: str = "",
        value: str = "",
        help: str = "",
        repeat: bool = False,
        optional: bool = False,
        const: Any = True,
    ) -> None:
        self.dest = dest
        self.short = short
        self.long = long
        self.value = value
        self.help = help
        self.repeat = repeat
        self.optional = optional
        self.const = const

    def names(self) -> str:
        parts = []
        if self.short:
            parts.append(f"-{self.short}")
        if self.long:
            parts.append(f"--{self.long}")
        text = ", ".join(parts)
        if self.value and self.optional:
            return f"{text}[={self.value}]"
        return f"{text} {self.value}" if self.value else text


class UsageError(CliError):
    """An argument the parser refuses. getopt_text is what glibc's getopt_long says of it (Slurm's commands print
    `ARGV0: getopt_text` and `Try "CMD --help" for more information`: see getopt_lines)."""

    def __init__(self, message: str, getopt_text: str) -> None:
        super().__init__(message, exit_code=1)
        self.getopt_text = getopt_text


def usage_error(program: str, message: str, getopt_text: str = "") -> UsageError:
    return UsageError(f"{message}; run '{program} --help' for the options", getopt_text or message)


def getopt_lines(argv0: str, program: str, error: UsageError) -> str:
    """The two lines a Slurm command prints on stderr for an option getopt refuses (exit 1)."""
    return f'{argv0}: {printable(error.getopt_text)}\nTry "{program} --help" for more information\n'


def parse(
    program: str,
    options: list[Option],
    argv: list[str],
    stop_at_positional: bool = False,
) -> tuple[dict[str, Any], list[str]]:
    """-> (values by dest, positional arguments). Flags are True when given; absent options are None.

    stop_at_positional: everything from the first positional argument on is positional (sbatch SCRIPT ARGS).
    """
    values: dict[str, Any] = {o.dest: ([] if o.repeat else None) for o in options}
    by_short = {o.short: o for o in options if o.short}
    by_long = {o.long: o for o in options if o.long}
    positionals: list[str] = []

    def store(option: Option, value: Any) -> None:
        if option.repeat:
            values[option.dest].append(value)
        else:
            values[option.dest] = value

    i = 0
    while i < len(argv):
        arg = argv[i]
        i += 1
        if arg == "--":
            positionals.extend(argv[i:])
            break
        if arg.startswith("--"):
            name, has_value, inline = arg[2:].partition("=")
            option = by_long.get(name)
            if option is None:
                matches = [o for n, o in by_long.items() if n.startswith(name)]
                if len(matches) > 1:
                    choices = ", ".join("--" + o.long for o in matches)
                    raise usage_error(
                        program,
                        f"option '--{name}' is ambiguous (could be {choices})",
                        f"option '--{name}' is ambiguous; possibilities:" + "".join(f" '--{o.long}'" for o in matches),
                    )
                if not matches:
                    raise usage_error(program, f"unrecognized option '{arg}'")
                option = matches[0]
            if option.value:
                if has_value:
                    store(option, inline)
                elif option.optional:
                    store(option, option.const)
                elif i < len(argv):
                    store(option, argv[i])
                    i += 1
                else:
                    raise usage_error(
                        program,
                        f"option '--{option.long}' needs a value ({option.value})",
                        f"option '--{option.long}' requires an argument",
                    )
            elif has_value:
                raise usage_error(
                    program,
                    f"option '--{option.long}' takes no value, got '{inline}'",
                    f"option '--{option.long}' doesn't allow an argument",
                )
            else:
                store(option, option.const)
            continue
        if arg.startswith("-") and arg != "-":
            letters = arg[1:]
            while letters:
                letter, letters = letters[0], letters[1:]
                option = by_short.get(letter)
                if option is None:
                    raise usage_error(program, f"invalid option '-{letter}'", f"invalid option -- '{letter}'")
                if not option.value:
                    store(option, option.const)
                    continue
                if letters:
                    store(option, letters)
                elif option.optional:
                    store(option, option.const)
                elif i < len(argv):
                    store(option, argv[i])
                    i += 1
                else:
                    raise usage_error(
                        program,
                        f"option '-{letter}' needs a value ({option.value})",
                        f"option requires an argument -- '{letter}'",
                    )
                letters = ""
            continue
        positionals.append(arg)
        if stop_at_positional:
            positionals.extend(argv[i:])
            break
    return values, positionals


def help_text(program: str, synopsis: str, description: str, options: list[Option]) -> str:
    lines = [f"Usage: {program} {synopsis}", ""]
    if description:
        lines += [description, ""]
    width = max((len(o.names()) for o in options), default=0) + 2
    for option in options:
        lines.append(f"  {option.names():<{width}}{option.help}")
    return "\n".join(lines)


def split_list(text: str | None) -> list[str]:
    """'a,b,,c' -> ['a', 'b', 'c'] (Slurm lists are comma-separated)."""
    if not text:
        return []
    return [part.strip() for part in text.split(",") if part.strip()]


def gather(values: list[str]) -> list[str]:
    """Repeated comma-separated options (-u a,b -u c) -> one list."""
    out: list[str] = []
    for value in values:
        out.extend(split_list(value))
    return out
