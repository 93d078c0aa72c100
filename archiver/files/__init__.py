"""Archived files themselves, below both the pipeline that writes them (archiver.archive)
and the operations that read, rewrite and retire them (restore, verify, the ledger,
erase, purge, delta): their object names (names), what a file holds and its key and
cutoff ranges (stats), a file written again with some of its rows (rewrite, and the
key ends of those rows in PostgreSQL's order), and offline files' blobs moved to the
Archive tier when readers no longer need them where they are (offline)."""
