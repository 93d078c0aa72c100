-- Every read of the archive through archiver serve, and every refusal: who signed in, on
-- whose behalf (a claim of the client's: postgres_fdw's application_name from archiver
-- attach), from where, the statement (its parameters only with ARCHIVER_AUDIT_PARAMETERS),
-- the tables and columns it read, the rows it returned, how long it took and how it ended
-- (`ok`, or the SQLSTATE: 42501 a refusal, 28P01 a failed sign-in). serve writes it off
-- the statement's path, in batches; the pruner keeps it for ARCHIVER_RETENTION_DAYS.
-- Ops read the view:
--   SELECT at, role, statement, outcome FROM archive_reads WHERE outcome <> 'ok' ORDER BY at DESC;
CREATE TABLE archiver_reads (
    id           bigserial        PRIMARY KEY,
    at           timestamptz      NOT NULL,  -- when the statement, or the sign-in, began
    door         text             NOT NULL,  -- serve
    role         text             NOT NULL,  -- who signed in
    on_behalf_of text,                       -- the client's claim of whom it reads for
    address      text,                       -- the client's address
    application  text,                       -- its application_name
    statement    text,                       -- as sent; NULL for a sign-in
    parameters   text[],                     -- as sent (text), only when asked for
    tables       text[]           NOT NULL DEFAULT '{}',  -- schema.table
    columns      text[]           NOT NULL DEFAULT '{}',  -- schema.table.column
    rows         bigint,                     -- returned
    duration_ms  double precision,
    outcome      text             NOT NULL   -- ok, or the SQLSTATE
);
CREATE INDEX archiver_reads_at ON archiver_reads (at DESC);
CREATE INDEX archiver_reads_role ON archiver_reads (role, at DESC);
CREATE INDEX archiver_reads_refused ON archiver_reads (at DESC) WHERE outcome <> 'ok';
CREATE INDEX archiver_reads_tables ON archiver_reads USING gin (tables);

CREATE VIEW archive_reads AS
SELECT at, door, role, on_behalf_of, address, application, statement, parameters, tables,
       columns, rows, duration_ms, outcome
FROM archiver_reads;

-- Archive-only access: a role that may read a table's archive (every column, or those
-- named) whatever the live table grants it -- an auditor who reads archived orders and
-- no live ones. `archiver access grant|revoke|list`; serve adds these to the grants it
-- mirrors from the live tables, and its mirroring never takes them away.
CREATE TABLE archive_access (
    table_name text        NOT NULL,  -- schema.table, as archived
    role       name        NOT NULL,
    columns    text[],                -- NULL: every column
    granted_by text        NOT NULL,
    granted_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (table_name, role)
);
