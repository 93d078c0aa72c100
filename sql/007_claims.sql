-- Every claim of a job, counted and never reset: the token in its file names
-- (archiver/archive/names.py). `attempts` is a budget, which a graceful hand-back gives
-- back and `archiver retry` starts again; a token that came round again would let a new
-- claim take an earlier claim's file name, and leave that claim's uncatalogued uploads
-- outside the sweep that deletes the uploads of earlier claims.
ALTER TABLE background_jobs ADD COLUMN claims integer NOT NULL DEFAULT 0;

-- Jobs claimed before: at least as many claims as their attempts, and as the highest
-- token among their catalogued files (a retry or a hand-back may have lowered attempts).
UPDATE background_jobs j
SET claims = GREATEST(j.attempts, COALESCE((
        SELECT max((substring(f.path FROM '-a(\d+)-part-\d+\.parquet$'))::int)
        FROM archive_files f WHERE f.job_id = j.id), 0))
WHERE j.attempts > 0 OR EXISTS (SELECT 1 FROM archive_files f WHERE f.job_id = j.id);
