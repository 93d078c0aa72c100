"""`archiver query`: SQL over the archive in place, and with `--with-live` over each
archived table's live rows together with its archived rows, one read-only relation,
exact while archiver's own jobs run. The package: `statement` (what a statement is and
reads), `catalog` (step 1), `source` (the live side, step 2), `views` (step 3),
`engine` (DuckDB, the run and its output); `answer` below ties them.

Exactness comes from one PostgreSQL snapshot. A move's chunk deletes its rows and
catalogues its file in one transaction (the catalog in the source database, the
default), and so do a restore's move back, an erasure and a purge: a snapshot sees each
row live or in exactly one committed file, never both, never neither. So:

 1 a catalog connection opens a REPEATABLE READ, READ ONLY transaction, exports its
   snapshot (pg_export_snapshot) and reads the committed files of every table in it;
 2 DuckDB's postgres scanner attaches the source database read-only and, first thing
   in its transaction, imports that snapshot (SET TRANSACTION SNAPSHOT), checked by
   reading pg_current_snapshot() back on both sides: the live rows are read at it;
 3 the archived rows are those files (not the Delta table, which lags its catalog by a
   publication), read where they are stored.

A file retired and deleted between 1 and 3 (a restore, erase or purge committing
meanwhile) cannot be read: the query is run again at a new snapshot, up to RETRIES
times. With the catalog in another database than the source (ARCHIVER_SOURCE_URL), no
snapshot sees both, and --with-live refuses.

Each view presents one type per column, the live table's as DuckDB reads it: archived
uuid/json/time text is cast back, PostgreSQL-only values kept as text beside a column
(`c__pg_text`, ±infinity) are cast back into it, an enum is VARCHAR on both sides; a
column added since the files were written is NULL in them, a column dropped since is
kept (NULL in the live rows). `_archiver_source` says where a row came from: 'live' or
'archive'."""
