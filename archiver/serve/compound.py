"""PostgreSQL's text of compound values read back and written again: arrays of any
dimension (array_in's syntax, lower bounds included), records (record_in's) and
multiranges, and a record's field or a range's bound quoted as record_out and range_out
quote them. What the binary forms (archiver.serve.registry) and the session's time zone
need of values archived as their text."""

from __future__ import annotations

import re

RECORD_SPECIAL = re.compile(r'[",\\()\s]')
RANGE_SPECIAL = re.compile(r'[",\\()\[\]\s]')


def quoted(value: str, special: re.Pattern[str] = RECORD_SPECIAL) -> str:
    """A field of a record (or a range's bound) as record_out and range_out write it."""
    if value and not special.search(value):
        return value
    return '"' + value.replace("\\", "\\\\").replace('"', '""') + '"'


def parse_array(text: str, delimiter: str = ",") -> tuple[list[tuple[int, int]], list[str | None]]:
    """An array's text: ([(length, lower bound)] of each dimension, the elements in
    order), PostgreSQL's array_in read back."""
    bounds: list[int] | None = None
    if text.startswith("["):  # [0:1]={…}: bounds other than 1
        head, _, text = text.partition("=")
        bounds = [int(low) for low, _ in re.findall(r"\[(-?\d+):(-?\d+)\]", head)]
    items: list[str | None] = []
    at = 0
    while at < len(text):
        c = text[at]
        if c in "{}" or c == delimiter or c.isspace():
            at += 1
        elif c == '"':
            end, chars = at + 1, []
            while text[end] != '"':
                if text[end] == "\\":
                    end += 1
                chars.append(text[end])
                end += 1
            items.append("".join(chars))
            at = end + 1
        else:
            end = at
            while end < len(text) and text[end] != delimiter and text[end] != "}":
                end += 1
            word = text[at:end].strip()
            items.append(None if word.upper() == "NULL" else word)
            at = end
    if not items:
        return [], []
    dims = _dimensions(text, delimiter)
    return list(zip(dims, bounds or [1] * len(dims), strict=True)), items


def _dimensions(text: str, delimiter: str) -> list[int]:
    """Each dimension's length, outermost first, counted along each level's first run."""
    lengths: list[int] = []
    finished: list[bool] = []
    depth, at, quoted = 0, 0, False
    while at < len(text):
        c = text[at]
        if quoted:
            if c == "\\":
                at += 1
            elif c == '"':
                quoted = False
        elif c == '"':
            quoted = True
        elif c == "{":
            depth += 1
            if len(lengths) < depth:
                lengths.append(1)
                finished.append(False)
        elif c == "}":
            finished[depth - 1] = True
            depth -= 1
        elif c == delimiter and not finished[depth - 1]:
            lengths[depth - 1] += 1
        at += 1
    return lengths


def parse_record(text: str) -> list[str | None]:
    """A composite's text `(a,"b c",)`: each field's text, None where empty."""
    text = text.strip()
    if not (text.startswith("(") and text.endswith(")")):
        raise ValueError(f"{text[:40]!r} is not a record")
    body = text[1:-1]
    out: list[str | None] = []
    at, quoted, touched = 0, False, False
    field: list[str] = []
    while at <= len(body):
        if at == len(body) or (body[at] == "," and not quoted):
            out.append("".join(field) if touched else None)
            field, touched = [], False
            at += 1
            if at > len(body):
                break
            continue
        c = body[at]
        if c == '"':
            touched = True
            if quoted and at + 1 < len(body) and body[at + 1] == '"':
                field.append('"')
                at += 2
                continue
            quoted = not quoted
        elif c == "\\" and at + 1 < len(body):
            field.append(body[at + 1])
            touched = True
            at += 1
        else:
            field.append(c)
            touched = True
        at += 1
    return out


def split_multirange(text: str) -> list[str]:
    body = text.strip()[1:-1]
    out, depth, start, quoted = [], 0, 0, False
    for i, c in enumerate(body):
        if c == '"':
            quoted = not quoted
        elif quoted:
            continue
        elif c in "[(":
            if depth == 0:
                start = i
            depth += 1
        elif c in "])":
            depth -= 1
            if depth == 0:
                out.append(body[start : i + 1])
        elif c.lower() == "e" and depth == 0 and body[i : i + 5].lower() == "empty":
            out.append("empty")
    return out
