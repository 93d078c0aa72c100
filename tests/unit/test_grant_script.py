"""The GRANT script's text: children marked, triggers named, and no name able to end a
comment line and run as SQL."""

from __future__ import annotations

import re

from archiver.grants import TableAccess, grant_script
from archiver.source.triggers import DeleteTrigger


def test_children_triggers_and_hostile_names() -> None:
    tables = [
        TableAccess("public", "orders", ("id",)),
        TableAccess("public", "items\nDROP TABLE orders; --", ("order_id", "n"), "public.orders"),
    ]
    triggers = [
        DeleteTrigger("public.items", "log\nDROP TABLE orders;", "AFTER", "log_item()", False),
        DeleteTrigger("public.orders", "owned", "AFTER", "as_owner()", True),
    ]
    script = grant_script(
        "public", "w", tables, True, triggers=triggers, refused=["public.x: a\rb"]
    )
    lines = script.splitlines()
    outside_identifiers = re.sub(r'"(?:[^"]|"")*"', "", script).splitlines()
    assert not [line for line in outside_identifiers if "DROP" in line and "--" not in line]
    assert not [line for line in outside_identifiers if line.startswith("DROP")], script
    assert (
        "-- public.items\\nDROP TABLE orders; --: moved with public.orders (--with-children)"
        in lines
    )
    assert "--   public.items: log\\nDROP TABLE orders; runs log_item()" in lines
    assert "owned" not in script  # SECURITY DEFINER: runs as its owner
    assert lines[-1] == "-- public.x: a\\rb"
    assert (
        'GRANT UPDATE ("order_id", "n") ON "public"."items\nDROP TABLE orders; --" TO "w";'
        in script
    )


def test_the_schemas_of_types_named_by_schema_get_usage() -> None:
    """citext in its own schema, named in a key's casts and a foreign key's operators:
    USAGE there, once, and not twice where a table's own schema is that schema."""
    tables = [TableAccess("public", "users", ("email",))]
    script = grant_script("public", "w", tables, True, type_schemas=["ext", "public"])
    lines = script.splitlines()
    assert [line for line in lines if line.startswith('GRANT USAGE ON SCHEMA "ext"')] == [
        'GRANT USAGE ON SCHEMA "ext" TO "w";  -- types and operators of keys and foreign keys'
    ]
    assert len([line for line in lines if line.startswith('GRANT USAGE ON SCHEMA "public"')]) == 1
