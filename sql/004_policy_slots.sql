-- Scheduled archiving: a job enqueued by a policy remembers its policy and slot, and a
-- (policy, slot) pair exists at most once -- for as long as the job row lives, whatever
-- its status -- so any number of schedulers can fire the same slot safely.
ALTER TABLE background_jobs
    ADD COLUMN policy_name text,
    ADD COLUMN slot_at     timestamptz,
    ADD CONSTRAINT background_jobs_policy_slot_pair
        CHECK ((policy_name IS NULL) = (slot_at IS NULL));

CREATE UNIQUE INDEX background_jobs_policy_slot ON background_jobs (policy_name, slot_at);
