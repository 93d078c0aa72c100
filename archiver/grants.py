"""Least privilege: the GRANT statements a role needs to run workers, the scheduler and the
operator commands, and nothing more. Migrations run as the schema's owner; everything
else can run as a role given exactly these."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from archiver.ident import quote_ident

if TYPE_CHECKING:
    from archiver.source.triggers import DeleteTrigger

# What the queue's code reads and writes (archiver.store, the views); one line each.
QUEUE_TABLES = (
    ("background_jobs", "SELECT, INSERT, UPDATE, DELETE", "enqueue, claim, finish, prune"),
    ("archive_files", "SELECT, INSERT, UPDATE, DELETE", "the catalog: record, confirm, forget"),
    ("archiver_paused_tables", "SELECT, INSERT, DELETE", "archiver pause/resume --table"),
    ("archiver_job_counts", "SELECT, INSERT, DELETE", "finished jobs counted as they finish"),
    ("archiver_file_counts", "SELECT, INSERT, DELETE", "catalogued files counted as they change"),
    ("delta_tables", "SELECT, INSERT, UPDATE", "Delta Lake: each table's publications"),
    ("archive_ledger", "SELECT, INSERT, UPDATE", "restore: rows taken out of the archive"),
    ("archive_verifications", "SELECT, INSERT", "archiver verify: what it found"),
    ("archiver_audit", "SELECT, INSERT", "who cancelled, retried, paused, throttled what"),
    ("archiver_reads", "SELECT, INSERT, DELETE", "serve's read audit: written, pruned, shown"),
    ("archive_access", "SELECT, INSERT, UPDATE, DELETE", "archiver access: archive-only readers"),
    ("archiver_maintenance", "SELECT, INSERT, UPDATE", "when each maintenance duty last ran"),
    ("archiver_migrations", "SELECT", "archiver doctor: is the schema current"),
    ("iceberg_tables", "SELECT, INSERT, UPDATE, DELETE", "Iceberg: each table's metadata file"),
    ("iceberg_namespace_properties", "SELECT, INSERT", "Iceberg: each schema's namespace"),
)
QUEUE_VIEWS = (
    "archiver_job_summary",
    "archiver_running_jobs",
    "archiver_failed_jobs",
    "archiver_archive_files",
    "archiver_paused",
    "archive_reads",
)
QUEUE_SEQUENCES = (
    "archive_files_id_seq",
    "archive_ledger_id_seq",
    "archive_verifications_id_seq",
    "archiver_audit_id_seq",
    "archiver_reads_id_seq",
)


@dataclass(frozen=True)
class TableAccess:
    """An application table and the columns of the key archiver walks it by."""

    schema: str
    name: str
    key: tuple[str, ...]
    child_of: str = ""  # the table it is moved with (--with-children), if it is a child

    @property
    def quoted(self) -> str:
        return f"{quote_ident(self.schema)}.{quote_ident(self.name)}"


def queue_grants(schema: str, role: str) -> list[str]:
    """On the queue database. LISTEN and NOTIFY need no privilege; the queue's functions
    (its trigger, archiver_job_paused) are executable by PUBLIC."""
    r, s = quote_ident(role), quote_ident(schema)
    lines = [f"GRANT USAGE ON SCHEMA {s} TO {r};"]
    for table, privileges, why in QUEUE_TABLES:
        lines.append(f"GRANT {privileges} ON {s}.{quote_ident(table)} TO {r};  -- {why}")
    views = ", ".join(f"{s}.{quote_ident(v)}" for v in QUEUE_VIEWS)
    lines.append(f"GRANT SELECT ON {views} TO {r};  -- archiver status")
    for sequence in QUEUE_SEQUENCES:
        lines.append(f"GRANT USAGE ON SEQUENCE {s}.{quote_ident(sequence)} TO {r};")
    return lines


def table_grants(table: TableAccess, role: str) -> list[str]:
    """On the source database, for one table: read and delete its rows (move), lock them
    (FOR UPDATE needs UPDATE on at least one column: the key's, nothing else is ever
    updated), and insert them back (restore)."""
    r, t = quote_ident(role), table.quoted
    keys = ", ".join(quote_ident(k) for k in table.key)
    child = [f"{table.schema}.{table.name}: moved with {table.child_of} (--with-children)"]
    return [
        *(comment(child) if table.child_of else []),
        f"GRANT USAGE ON SCHEMA {quote_ident(table.schema)} TO {r};",
        f"GRANT SELECT, DELETE ON {t} TO {r};  -- archive (copy mode needs SELECT only)",
        f"GRANT UPDATE ({keys}) ON {t} TO {r};  -- row locks (FOR UPDATE)",
        f"GRANT INSERT ON {t} TO {r};  -- restore",
    ]


def comment(lines: Iterable[str]) -> list[str]:
    """SQL comment lines; a name's newline or other control character is escaped, so no
    name can end the comment and run as SQL."""
    safe = ("".join(c if c.isprintable() else ascii(c)[1:-1] for c in line) for line in lines)
    return [f"-- {line}" for line in safe]


def grant_script(
    queue_schema: str,
    role: str,
    tables: list[TableAccess],
    same_database: bool,
    *,
    type_schemas: Sequence[str] = (),
    triggers: Sequence[DeleteTrigger] = (),
    refused: Sequence[str] = (),
) -> str:
    """The whole script, in sections by database, deduplicated. `type_schemas`: where the
    types and operators archiver names by schema live (an extension's: a citext key, a
    foreign key's equality), which needs USAGE there; `triggers`: the moved tables'
    row-level DELETE triggers, whose functions run as the role unless SECURITY DEFINER;
    `refused`: why a table's children could not be read."""
    out = ["-- on the queue database (ARCHIVER_DATABASE_URL)", *queue_grants(queue_schema, role)]
    if tables:
        where = (
            "the same database" if same_database else "the source database (ARCHIVER_SOURCE_URL)"
        )
        out += ["", f"-- on {where}"]
        for table in tables:
            out += [line for line in table_grants(table, role) if line not in out]
        r = quote_ident(role)
        for schema in type_schemas:
            usage = f"GRANT USAGE ON SCHEMA {quote_ident(schema)} TO {r};"
            if usage not in out:  # not already a table's schema
                out.append(f"{usage}  -- types and operators of keys and foreign keys")
        out += [
            "-- restore and --with-children stage rows in temporary tables: PUBLIC has",
            "-- TEMPORARY on a database by default; where it was revoked, GRANT TEMPORARY ON",
            "-- DATABASE <db> TO the role.",
            "-- Whole partitions (--partitions drop|detach) are DETACHed and DROPped, which only",
            "-- the table's owner may do; without ownership, enqueue moves their rows instead.",
            "-- restore --into a new table also needs CREATE on that table's schema.",
            "-- --max-replica-lag reads replicas' positions: GRANT pg_monitor TO the role.",
        ]
        invoker = [t for t in triggers if not t.definer]
        if invoker:
            out += [
                "-- These DELETE triggers run for every moved row as this role: grant what",
                "-- their functions touch (or make the functions SECURITY DEFINER).",
                *comment(f"  {t.table}: {t.name} runs {t.function}" for t in invoker),
            ]
        out += comment(refused)
    return "\n".join(out)
