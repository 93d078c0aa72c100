"""The archive pipeline: plan (plan), one chunk's six steps (chunk), their commit in the
form the job's databases need (commit), a job from start to end (job), copy mode's one
snapshot (snapshot). Object names and what a file holds are archiver.files'. Knows
nothing of the queue."""
