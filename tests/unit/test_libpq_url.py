"""archiver.bulk.libpq_url: the keepalives and the process's application_name a libpq
URL gets where it names none, quoted so that libpq reads the name as it is."""

from __future__ import annotations

from urllib.parse import unquote

from archiver import bulk, db


def test_the_application_name_reaches_libpq_as_it_is() -> None:
    db.set_application_name("archiver restore 12+3")
    try:
        made = bulk.libpq_url("postgresql://u@h:5432/d?sslmode=disable")
        assert "+" not in made.split("application_name=")[1].replace("%2B", "")
        assert unquote(made.split("application_name=")[1]) == "archiver restore 12+3"
        assert "keepalives=1" in made and made.startswith(
            "postgresql://u@h:5432/d?sslmode=disable&"
        )
        own = "postgresql://u@h/d?keepalives=0&application_name=mine"
        assert bulk.libpq_url(own) == own  # the URL's own settings stay
    finally:
        db.set_application_name("archiver")
