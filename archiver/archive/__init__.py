"""The archive pipeline: plan (plan), one chunk's six steps (chunk), their commit in the
form the job's databases need (commit), a job from start to end (job), object names
(names) and what a file holds (stats). Knows nothing of the queue."""
