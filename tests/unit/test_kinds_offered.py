"""Job kinds and statuses are derived, not listed: a kind registered in archiver.kinds.registry is
offered and accepted by the console's job filter, as every status is."""

from __future__ import annotations

import re
from typing import Any

import pytest

from archiver.errors import InputError
from archiver.kinds.kind import Kind
from archiver.kinds.registry import KINDS
from archiver.model import Status
from archiver.web import pages
from archiver.web.app import environment
from archiver.web.auth import Who


def offered(page: str, name: str) -> list[str]:
    """The options of the jobs page's <select name=...>."""
    select = re.search(rf'<select name="{name}">(.*?)</select>', page, re.S)
    assert select, page
    return re.findall(r"<option[^>]*>([^<]*)</option>", select.group(1))


def jobs_page(**context: Any) -> str:
    return environment().get_template("jobs.html").render(
        jobs=[], filters=pages.JobFilter(), after=None, statuses=pages.STATUSES,
        tasks=pages.task_names(), root="", who=Who(None, None), can_act=False, csrf="",
        bulk_actions=(),
        login_possible=False, **context,
    )  # fmt: skip


def test_every_kind_and_status_is_offered_and_accepted(monkeypatch: pytest.MonkeyPatch) -> None:
    page = jobs_page()
    assert offered(page, "task") == ["any", *KINDS]
    assert {"compact", "orphans", "purge"} <= set(offered(page, "task"))
    assert offered(page, "status") == ["any", *(str(s) for s in Status)]
    # a kind registered in memory: offered, and the filter takes it
    extra = Kind("tidy", lambda w, run, request: None, lambda payload: None)
    monkeypatch.setitem(KINDS, "tidy", extra)
    assert offered(jobs_page(), "task")[-1] == "tidy"
    assert pages.JobFilter.parse({"task": "tidy"}).task == "tidy"
    with pytest.raises(InputError, match=r"expected one of archive, publish, .*tidy"):
        pages.JobFilter.parse({"task": "bogus"})
