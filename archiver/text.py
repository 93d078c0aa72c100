"""Numbers as an operator reads them in a sentence or a table cell: counts with their
noun, sizes, durations. Shared by the CLI's output and the log lines of the pipeline."""

from __future__ import annotations


def counted(n: int, noun: str) -> str:
    """'1 file', '3 files': a count in a sentence."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def size(nbytes: float | None) -> str:
    if nbytes is None:
        return "-"
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(nbytes) < 1000 or unit == "TB":
            return f"{nbytes:.0f} {unit}" if unit == "B" else f"{nbytes:.1f} {unit}"
        nbytes /= 1000
    raise AssertionError("unreachable")


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    hours, rest = divmod(round(seconds), 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


def period(seconds: float) -> str:
    """'7 days', '1 day', '12 hours', '90 s': a setting's length of time in a sentence."""
    for unit, length in (("day", 86400), ("hour", 3600)):
        if seconds >= length and seconds % length == 0:
            return counted(int(seconds // length), unit)
    return f"{seconds:g} s"
