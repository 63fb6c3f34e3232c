-- River's two GIN indexes of river_job, on args and on metadata, go: no
-- query of paygate's or of River's (v0.51: fetching, completion, the
-- cleaner, the rescuer, River UI's job lists) reads them, and they are the
-- most expensive indexes of the busiest table. Every job row is written
-- three times (inserted at ingest, updated when fetched, updated when
-- completed), no update is HOT, so each write adds its keys to both
-- indexes' pending lists, and whichever statement overflows a list merges
-- it into the index inside its own transaction: a webhook whose ingest
-- batch is that statement waits for it. In make bench, three runs each way
-- at 64 connections: p99 107, 124, 67 ms with them, 71, 47, 42 ms without;
-- the longest request 207, 272, 159 ms against 175, 73, 63 ms
-- (docs/performance.md; the merges are the likely cause of those tails,
-- not traced one by one). jobs.NewClient leaves them out of River's
-- reindexer. The lookups of a job by its event use
-- river_job_process_event_errors_idx (0014) or river_job_kind.
DROP INDEX IF EXISTS river_job_args_index;
DROP INDEX IF EXISTS river_job_metadata_index;
