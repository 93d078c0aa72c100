"""One serve session's settings, as PostgreSQL keeps a backend's: SET and SET LOCAL
(undone at the transaction's end), RESET and DISCARD ALL (back to what the start-up
packet set), the settings serve writes values by (checked: what it cannot write is
refused) and the style it writes them in, and what each change reports to the client
(ParameterStatus)."""

from __future__ import annotations

from archiver.serve import text
from archiver.serve.statements import REPORTED
from archiver.serve.wire import SqlError

# Settings serve keeps for itself: what it writes values in, and what it reports
OWN = frozenset(
    (
        "client_encoding",
        "datestyle",
        "intervalstyle",
        "timezone",
        "standard_conforming_strings",
        "extra_float_digits",
        "bytea_output",
    )
)

Reported = dict[str, str]  # a setting's name as REPORTED spells it -> its value now


class SessionSettings:
    """`values`: serve's own settings and those it reports, as it writes them;
    `changed`: the settings the client set, as it spelled them (each statement sent to
    PostgreSQL runs with them); `style`: how values are written under them."""

    def __init__(self, values: dict[str, str], money: text.Money) -> None:
        self.values = values
        self.changed: dict[str, str] = {}
        self._money = money
        self._defaults: tuple[dict[str, str], dict[str, str]] = (dict(values), {})
        self._local: dict[str, tuple[str | None, str | None]] = {}  # SET LOCAL's undo
        self.style = text.Style(text.UTC, money=money)

    def get(self, name: str) -> str | None:
        return self.values.get(name)

    def started(self) -> None:
        """What the start-up packet set is what RESET returns to."""
        self._defaults = (dict(self.values), dict(self.changed))

    def set(self, name: str, value: str, *, local: bool, in_transaction: bool) -> Reported:
        """SET (or SET LOCAL) of a value PostgreSQL checked and spelled."""
        if name in OWN:
            _check(name, value)
        if local:
            if not in_transaction:
                return {}  # SET LOCAL outside a transaction: PostgreSQL warns, it lasts nothing
            self._local.setdefault(name, (self.values.get(name), self.changed.get(name)))
        if name in self.values or name in OWN:
            self.values[name] = value
        if name != "client_encoding":
            self.changed[name] = value
        self._restyle()
        return {REPORTED[name]: value} if name in REPORTED else {}

    def reset(self, name: str) -> Reported:
        """RESET `name` (or "all"): back to what the start-up set."""
        values, changed = self._defaults
        names = set(self.values) | set(self.changed) if name == "all" else {name}
        reported = {}
        for key in names:
            before = self.values.get(key)
            _put(self.values, key, values.get(key))
            _put(self.changed, key, changed.get(key))
            if key in REPORTED and key in self.values and self.values[key] != before:
                reported[REPORTED[key]] = self.values[key]
        self._restyle()
        return reported

    def end_transaction(self) -> Reported:
        """COMMIT or ROLLBACK: what SET LOCAL set, undone."""
        reported = {}
        for name, (value, changed) in self._local.items():
            _put(self.values, name, value)
            _put(self.changed, name, changed)
            if name in REPORTED and value is not None:
                reported[REPORTED[name]] = value
        self._local = {}
        self._restyle()
        return reported

    def _restyle(self) -> None:
        digits = self.changed.get("extra_float_digits", "1")
        self.style = text.Style(
            text.Zone(self.values.get("timezone", "UTC")),
            int(digits) if digits.lstrip("-").isdigit() else 1,
            self.changed.get("bytea_output") == "escape",
            self._money,
        )


def _put(settings: dict[str, str], name: str, value: str | None) -> None:
    if value is None:
        settings.pop(name, None)
    else:
        settings[name] = value


def _check(name: str, value: str) -> None:
    """One of the settings serve writes values by: refused where it cannot."""
    if name == "datestyle" and not value.upper().startswith("ISO"):
        raise SqlError(
            "0A000",
            f"archiver serve writes dates in the ISO style only: DateStyle {value!r} refused",
        )
    if name == "intervalstyle" and value != "postgres":
        raise SqlError(
            "0A000",
            f"archiver serve writes intervals in the postgres style only: IntervalStyle {value!r} refused",
        )
    if name == "standard_conforming_strings" and value != "on":
        raise SqlError("0A000", "archiver serve reads standard-conforming strings only")
    if name == "timezone":
        try:
            text.Zone(value)
        except ValueError as exc:
            raise SqlError("0A000", str(exc)) from None
