"""Job kinds: what a worker does with each `task_name` of background_jobs, as River
registers a worker per job kind. The worker's claim loop, its runs and its maintenance
never look at a kind's name: they ask the registry (archiver/kinds/registry.py) for the
kind's handler, and the result it returns says how the job completed.

A kind is one module here (archiver/kinds/publish.py is the one to copy): its request
(its name `KIND`, its payload written by `payload()` when queued and read back by
`from_payload` when claimed, and `queueing()`: its dedup and lock keys, attempts and
priority, read by store.jobs.enqueue_request), its typed result (kept in the job's
progress by `to_json`, said in the worker's log by `said`), its handler, `KIND =
Kind.of(Request, handler)`, and, where workers queue it for themselves, the function
that does. The handler is typed with its request, so the type checker holds the two
together. To add a kind: its module, and its line in the registry.

Each kind's module is a room of its own: an operation a handler runs may queue another
kind (a compaction's publishes its table) without an import running back up."""
