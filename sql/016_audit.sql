-- Who changed what in the queue: one row per operator action (cancel, retry, pause,
-- resume, throttle, the console's bulk actions), written in the transaction of the change
-- itself, from the console (the reverse proxy's identity or the login's name, and the
-- client's address) or the CLI (user@host). Ops read it in plain SQL:
--   SELECT at, actor, action, target, outcome FROM archiver_audit ORDER BY at DESC;
CREATE TABLE archiver_audit (
    id       bigserial   PRIMARY KEY,
    at       timestamptz NOT NULL DEFAULT now(),
    actor    text        NOT NULL,
    address  text,                          -- the console's client; NULL from the CLI
    via      text        NOT NULL CHECK (via IN ('console', 'cli')),
    action   text        NOT NULL,          -- cancel, retry, pause, …, bulk retry, …
    target   text        NOT NULL,          -- `job <id>`, `table <schema.name>`, a bulk filter
    outcome  text        NOT NULL           -- what happened, as the command said it
);
CREATE INDEX archiver_audit_target ON archiver_audit (target, at DESC);
CREATE INDEX archiver_audit_at ON archiver_audit (at DESC);
