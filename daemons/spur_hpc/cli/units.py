"""Slurm's notations for durations, memory sizes and points in time: parsing user input, formatting output."""

from __future__ import annotations

import time

from spur_hpc import model
from spur_hpc.cli.runner import CliError
from spur_hpc.model import INT64_MAX, TIME_LIMIT_FORMS, InvalidValue, bounded_int, is_number  # noqa: F401

# the protobuf fields numbers end up in: a larger value would wrap into another number on the wire
INT32_MAX = 2**31 - 1


def parse_time_limit(text: str, option: str = "--time") -> int:
    """Slurm -t/--time value -> seconds (0: no limit); the parser is model's, shared with spur.conf's MaxTime."""
    try:
        return model.parse_time_limit(text, option)
    except InvalidValue as exc:
        raise CliError(str(exc)) from None


_MEMORY_SHIFTS = {"K": -10, "M": 0, "G": 10, "T": 20}  # powers of two from the unit to megabytes


def parse_memory_mb(text: str, option: str = "--mem") -> int:
    """Slurm --mem value (MB unless a K/M/G/T suffix says otherwise) -> MiB, rounded up."""
    value = text.strip().upper()
    if value.endswith("B") and len(value) > 1 and value[-2] in _MEMORY_SHIFTS:
        value = value[:-1]  # "4GB" like "4G"
    shift = 0
    if value and value[-1] in _MEMORY_SHIFTS:
        shift = _MEMORY_SHIFTS[value[-1]]
        value = value[:-1]
    if not is_number(value):
        raise CliError(f"invalid {option} value '{text}': use a number of megabytes or a K, M, G or T suffix, like 4G")
    amount = bounded_int(value, INT64_MAX)
    megabytes = None if amount is None else amount << shift if shift >= 0 else -(-amount >> -shift)
    if megabytes is None or megabytes > INT64_MAX:
        raise CliError(f"invalid {option} value '{text}': the largest is {INT64_MAX} megabytes")
    return megabytes


def format_duration(seconds: float) -> str:
    """squeue %M / %l style: M:SS, H:MM:SS, D-HH:MM:SS."""
    total = max(0, int(seconds))
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}-{hours:02d}:{minutes:02d}:{secs:02d}"
    if hours:
        return f"{hours}:{minutes:02d}:{secs:02d}"
    return f"{minutes}:{secs:02d}"


def format_clock(seconds: float) -> str:
    """scontrol RunTime / sacct Elapsed style: HH:MM:SS, D-HH:MM:SS."""
    total = max(0, int(seconds))
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    clock = f"{hours:02d}:{minutes:02d}:{secs:02d}"
    return f"{days}-{clock}" if days else clock


def format_limit(seconds: int, unlimited: str = "UNLIMITED", clock: bool = False) -> str:
    if seconds <= 0:
        return unlimited
    return format_clock(seconds) if clock else format_duration(seconds)


def format_id_ranges(ids: list[int]) -> str:
    """CPU or gres unit ids as Slurm's bitmaps print them: runs of consecutive ids as a-b, the rest by commas
    (0-3,6). Not model.format_array_ranges: that writes strides (0-6:2), which a bitmap never shows."""
    runs: list[list[int]] = []
    for value in sorted(set(ids)):
        if runs and value == runs[-1][1] + 1:
            runs[-1][1] = value
        else:
            runs.append([value, value])
    return ",".join(f"{a}-{b}" if b > a else str(a) for a, b in runs)


def format_tres_memory(mb: int) -> str:
    """Memory as Slurm's TRES and MinMemory* write it: 4G for 4096 MB, 1500M otherwise."""
    return f"{mb // 1024}G" if mb and mb % 1024 == 0 else f"{mb}M"


def format_timestamp(epoch: float, unknown: str = "Unknown") -> str:
    """Slurm's ISO-like local time: 2024-05-01T10:00:00."""
    if epoch <= 0:
        return unknown
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(epoch))


_UNIT_SECONDS = {
    "second": 1, "seconds": 1, "sec": 1, "s": 1,
    "minute": 60, "minutes": 60, "min": 60, "m": 60,
    "hour": 3600, "hours": 3600, "h": 3600,
    "day": 86400, "days": 86400, "d": 86400,
    "week": 604800, "weeks": 604800, "w": 604800,
}  # fmt: skip
TIME_POINT_FORMS = "YYYY-MM-DD[THH:MM[:SS]], MM/DD[/YY], HH:MM[:SS], now[-N{minutes|hours|days|weeks}], today, midnight"


def parse_time_point(text: str, option: str, now: float | None = None) -> float:
    """sacct -S/-E values -> epoch seconds (local time, like Slurm)."""
    now = time.time() if now is None else now
    value = text.strip().lower()

    def bad() -> CliError:
        return CliError(f"invalid {option} value '{text}': use {TIME_POINT_FORMS}")

    today = time.localtime(now)
    midnight = time.mktime((today.tm_year, today.tm_mon, today.tm_mday, 0, 0, 0, 0, 0, -1))
    if value in ("today", "midnight"):
        return midnight
    if value == "noon":
        return midnight + 12 * 3600
    if value.startswith("now"):
        rest = value[3:]
        if not rest:
            return now
        sign = -1 if rest[0] == "-" else 1 if rest[0] == "+" else 0
        digits = rest[1:].rstrip("abcdefghijklmnopqrstuvwxyz")
        unit = rest[1 + len(digits) :] or "seconds"
        if not sign or not is_number(digits) or unit not in _UNIT_SECONDS:
            raise bad()
        offset = bounded_int(digits, 10**12)  # about 30,000 years in seconds: far enough either way
        if offset is None or offset * _UNIT_SECONDS[unit] > 10**12:
            raise CliError(f"invalid {option} value '{text}': that is more than 30,000 years from now")
        return now + sign * offset * _UNIT_SECONDS[unit]
    date_part, _, clock_part = text.strip().partition("T")
    try:
        if "-" in date_part:
            year, month, day = (int(p) for p in date_part.split("-"))
        elif "/" in date_part:
            pieces = [int(p) for p in date_part.split("/")]
            month, day = pieces[0], pieces[1]
            year = (2000 + pieces[2] if pieces[2] < 100 else pieces[2]) if len(pieces) == 3 else today.tm_year
        elif ":" in date_part and not clock_part:
            year, month, day = today.tm_year, today.tm_mon, today.tm_mday
            clock_part = date_part
        else:
            raise ValueError(date_part)
        clock = [int(p) for p in clock_part.split(":")] if clock_part else [0, 0, 0]
        hour, minute, second = (clock + [0, 0, 0])[:3]
        if not (1 <= month <= 12 and 1 <= day <= 31 and 0 <= hour < 24 and 0 <= minute < 60 and 0 <= second < 60):
            raise ValueError(text)
        if not 1970 <= year <= 9999:
            raise ValueError(text)
        return time.mktime((year, month, day, hour, minute, second, 0, 0, -1))
    except (ValueError, OverflowError):  # int() of a long digit string is a ValueError too
        raise bad() from None


BEGIN_TIME_FORMS = (
    "now+N[seconds|minutes|hours|days|weeks], HH:MM[:SS][AM|PM], today, tomorrow, midnight, noon, teatime, "
    "MM/DD[/YY][-HH:MM[:SS]], MMDD[YY], YYYY-MM-DD[THH:MM[:SS]]"
)
_NAMED_HOURS = {"midnight": 0, "noon": 12, "elevenses": 11, "fika": 15, "teatime": 16}


def parse_begin_time(text: str, option: str = "--begin", now: float | None = None) -> float:
    """sbatch --begin / --deadline values -> epoch seconds (local time, as Slurm reads them). A time of day
    that has passed today means tomorrow; so do midnight, noon and teatime; a bare date is its midnight."""
    now = time.time() if now is None else now
    value = text.strip().lower()

    def bad() -> CliError:
        return CliError(f"invalid {option} value '{text}': use {BEGIN_TIME_FORMS}")

    if value.startswith("now"):
        rest = value[3:].replace(" ", "")
        if not rest:
            return now
        if rest[0] != "+":
            raise bad()
        digits = rest[1:].rstrip("abcdefghijklmnopqrstuvwxyz")
        unit = rest[1 + len(digits) :] or "seconds"
        if not is_number(digits) or unit not in _UNIT_SECONDS:
            raise bad()
        offset = bounded_int(digits, 10**12)
        if offset is None or offset * _UNIT_SECONDS[unit] > 10**12:
            raise CliError(f"invalid {option} value '{text}': that is more than 30,000 years from now")
        return now + offset * _UNIT_SECONDS[unit]
    today = time.localtime(now)

    def at(year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0) -> float:
        if not (1970 <= year <= 9999 and 1 <= month <= 12 and 1 <= day <= 31):
            raise bad()
        if not (0 <= hour < 24 and 0 <= minute < 60 and 0 <= second < 60):
            raise bad()
        return time.mktime((year, month, day, hour, minute, second, 0, 0, -1))

    def next_at(hour: int, minute: int = 0, second: int = 0) -> float:
        moment = at(today.tm_year, today.tm_mon, today.tm_mday, hour, minute, second)
        if moment <= now:  # passed today: the same time tomorrow (mktime normalises day 32)
            moment = time.mktime((today.tm_year, today.tm_mon, today.tm_mday + 1, hour, minute, second, 0, 0, -1))
        return moment

    if value == "today":
        return at(today.tm_year, today.tm_mon, today.tm_mday)
    if value == "tomorrow":
        return time.mktime((today.tm_year, today.tm_mon, today.tm_mday + 1, 0, 0, 0, 0, 0, -1))
    if value in _NAMED_HOURS:
        return next_at(_NAMED_HOURS[value])

    def clock(part: str) -> tuple[int, int, int]:
        meridiem = ""
        for suffix in ("am", "pm"):
            if part.endswith(suffix):
                meridiem, part = suffix, part[: -len(suffix)].strip()
        pieces = part.split(":")
        if not 2 <= len(pieces) <= 3 or not all(is_number(p) and len(p) <= 2 for p in pieces):
            raise bad()
        hour, minute, second = (int(p) for p in (pieces + ["0"])[:3])
        if meridiem:
            if not 1 <= hour <= 12:
                raise bad()
            hour = hour % 12 + (12 if meridiem == "pm" else 0)
        return hour, minute, second

    if ":" in value and not any(sep in value for sep in "/-t."):
        return next_at(*clock(value))
    if len(value) >= 10 and value[4] == "-":  # YYYY-MM-DD[THH:MM[:SS]]
        date_part, _, clock_part = value.partition("t")
        pieces = date_part.split("-")
        if len(pieces) != 3 or not all(is_number(p) and len(p) <= 4 for p in pieces):
            raise bad()
        year, month, day = (int(p) for p in pieces)
        return at(year, month, day, *(clock(clock_part) if clock_part else (0, 0, 0)))
    date_part, _, clock_part = value.partition("-")  # MM/DD[/YY][-HH:MM[:SS]], MM.DD[.YY], MMDD[YY]
    separator = "/" if "/" in date_part else "." if "." in date_part else ""
    if separator:
        pieces = date_part.split(separator)
    elif len(date_part) in (4, 6) and is_number(date_part):
        pieces = [date_part[i : i + 2] for i in range(0, len(date_part), 2)]
    else:
        raise bad()
    if not 2 <= len(pieces) <= 3 or not all(is_number(p) and len(p) <= 4 for p in pieces):
        raise bad()
    month, day = int(pieces[0]), int(pieces[1])
    year = int(pieces[2]) if len(pieces) == 3 else today.tm_year
    year = year + 2000 if year < 100 else year
    moment = at(year, month, day, *(clock(clock_part) if clock_part else (0, 0, 0)))
    if len(pieces) == 2 and moment < now - 86400:  # a date without a year that has passed: next year's
        moment = at(year + 1, month, day, *(clock(clock_part) if clock_part else (0, 0, 0)))
    return moment
