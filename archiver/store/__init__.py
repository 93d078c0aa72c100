"""archiver's own tables, each with one owner: the only module whose SQL writes it.

    store/jobs.py           background_jobs (the queue), archiver_paused_tables,
                            archiver_job_counts, archiver_maintenance
    store/archive_files.py  archive_files (the catalog), archiver_file_counts,
                            archive_verifications
    store/ledger.py         archive_ledger (operations that take rows out of the archive)
    store/publications.py   delta_tables (each table's publications into its Delta log)
    store/audit.py          archiver_audit (who changed what in the queue)
    store/read_audit.py     archiver_reads (who read what of the archive, and who was refused)
    store/access.py         archive_access (who may read a table's archive alone)

and two that write nothing: store/reads.py (the reads spanning the state tables that the
archive's readers and the orphan sweep make on an ADBC cursor) and store/read_models.py
(what the CLI's reports and the console's pages read).

Each module's statements are named in the .sql file beside it (store/tables.sql holds
the read-only look-ups of PostgreSQL's own catalog); archiver.db.query finds one by name.
Outside store/, no module runs a statement on a state table: it calls a typed function
here (tests/unit/test_layout.py); a write only the owner runs (tests/unit/test_store.py). The event loop's side speaks asyncpg (archiver.db), a
job's thread and a ledger operation ADBC (archiver.bulk), in the transaction their
caller commits, so a file's row commits with the rows it stands for.

The schema itself lives in sql/ (the migrations)."""
