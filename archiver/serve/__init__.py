"""`archiver serve` and `archiver attach`: the archive behind a read-only PostgreSQL
endpoint, and inside the application's database as a foreign table and one exact view
per table. The package: `wire` (the protocol's bytes), `types` (which PostgreSQL type a
column is said to be), `text` and `binary` (PostgreSQL's forms of archived values), `scram`
(the password exchange), `statements` (what a client's statement is),
`fileset` (the files a statement reads, at one catalog query), `companions` (PostgreSQL-only
values beside their column), `archive` (a SELECT over the archive, as `archiver query`
reads it), `session` (one
connection's protocol state), `server` (listening, TLS, SCRAM, limits), `attach` (the
postgres_fdw objects in the application's database)."""
