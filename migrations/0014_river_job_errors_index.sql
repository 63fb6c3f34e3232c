-- The failed attempts of an event's process_event jobs (jobs.AttemptErrors,
-- for the event and poison views) are looked up by event id. river_job
-- holds a day of finished jobs, and River keeps errors NULL on a job that
-- never failed: this index holds only the jobs that failed at least once,
-- so it is small and costs nothing to the jobs that succeed. River's own
-- migrations leave indexes they do not know alone.
CREATE INDEX river_job_process_event_errors_idx
    ON river_job ((args->>'provider'), (args->>'event_id'))
    WHERE kind = 'process_event' AND errors IS NOT NULL;
