package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/paygate/paygate/inbox"
)

// The operator actions on inbox events. The API and the CLI both call these,
// each inside a transaction of its own (the API's is the Idempotency-Key's):
// the status change, the job and the audit entry commit together or not at
// all.

// ReplayEventTx runs processing of one event again, whatever its status: the
// event goes back to received (attempts keep counting) and a new
// process_event job is enqueued. Replaying a processed event is safe:
// applying an event is idempotent. The action is audited as op.
//
// It fails with inbox.ErrNotFound and inbox.ErrNoActor.
func (c *Client) ReplayEventTx(ctx context.Context, tx pgx.Tx, provider, eventID string, op inbox.Operation) (inbox.Event, error) {
	ev, err := inbox.ReplayTx(ctx, tx, provider, eventID)
	if err != nil {
		return inbox.Event{}, err
	}
	if err := c.InsertProcessEventTx(ctx, tx, provider, eventID); err != nil {
		return inbox.Event{}, err
	}
	if err := inbox.AppendAuditTx(ctx, tx, inbox.ActionReplay, op, inbox.Key{Provider: provider, EventID: eventID}); err != nil {
		return inbox.Event{}, err
	}
	return ev, nil
}

// ReplayResult is the outcome of a replay by filter.
type ReplayResult struct {
	Matched  int64
	Replayed int64
	DryRun   bool
}

// ReplayMatchingTx replays every event f selects, as ReplayEventTx does, with
// one audit entry (bulk_replay) per event. With dryRun it only counts them.
//
// It fails with inbox.ErrNoActor.
func (c *Client) ReplayMatchingTx(ctx context.Context, tx pgx.Tx, f inbox.Filter, op inbox.Operation, dryRun bool) (ReplayResult, error) {
	if dryRun {
		n, err := inbox.Count(ctx, tx, f)
		return ReplayResult{Matched: n, DryRun: true}, err
	}
	keys, err := inbox.ReplayMatchingTx(ctx, tx, f)
	if err != nil {
		return ReplayResult{}, err
	}
	byProvider := map[string][]string{}
	for _, k := range keys {
		byProvider[k.Provider] = append(byProvider[k.Provider], k.EventID)
	}
	for provider, ids := range byProvider {
		for len(ids) > 0 {
			n := min(len(ids), 1000)
			if err := c.InsertProcessEventsTx(ctx, tx, provider, ids[:n]); err != nil {
				return ReplayResult{}, err
			}
			ids = ids[n:]
		}
	}
	if err := inbox.AppendAuditTx(ctx, tx, inbox.ActionBulkReplay, op, keys...); err != nil {
		return ReplayResult{}, err
	}
	return ReplayResult{Matched: int64(len(keys)), Replayed: int64(len(keys))}, nil
}

// DiscardEventTx sets an event aside with a reason: status discarded, its
// unfinished process_event jobs cancelled (so a pending retry does not apply
// it behind the operator's back), and an audit entry. A discarded event can
// be replayed later.
//
// It fails with inbox.ErrNotFound, inbox.ErrReasonRequired,
// inbox.ErrAlreadyProcessed and inbox.ErrNoActor.
func (c *Client) DiscardEventTx(ctx context.Context, tx pgx.Tx, provider, eventID string, op inbox.Operation) (inbox.Event, error) {
	if strings.TrimSpace(op.Reason) == "" {
		return inbox.Event{}, inbox.ErrReasonRequired
	}
	ev, err := inbox.DiscardTx(ctx, tx, provider, eventID)
	if err != nil {
		return ev, err
	}
	if err := inbox.AppendAuditTx(ctx, tx, inbox.ActionDiscard, op, inbox.Key{Provider: provider, EventID: eventID}); err != nil {
		return inbox.Event{}, err
	}
	rows, err := tx.Query(ctx, liveJobsOfEvent, ProcessEventArgs{}.Kind(), provider, eventID)
	if err != nil {
		return inbox.Event{}, fmt.Errorf("find jobs of %s: %w", eventID, err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return inbox.Event{}, fmt.Errorf("find jobs of %s: %w", eventID, err)
	}
	for _, id := range ids {
		if _, err := c.River.JobCancelTx(ctx, tx, id); err != nil && !errors.Is(err, river.ErrNotFound) {
			return inbox.Event{}, fmt.Errorf("cancel job %d of %s: %w", id, eventID, err)
		}
	}
	return ev, nil
}

const (
	// liveJobsOfEvent: the ids of the event's ($2, $3) jobs of kind $1 that
	// may still run (few: River's state-led index finds them).
	liveJobsOfEvent = `
		SELECT id FROM river_job
		WHERE kind = $1 AND args->>'provider' = $2 AND args->>'event_id' = $3
		  AND state IN ('available', 'pending', 'retryable', 'running', 'scheduled')`
	// attemptErrorsOfEvents: every recorded error of the jobs of kind $1 of
	// the events $3 of provider $2. Only jobs that failed have errors, and
	// river_job_process_event_errors_idx holds just those (migration 0014):
	// the day of finished jobs River keeps is never read.
	attemptErrorsOfEvents = `
		SELECT j.args->>'event_id', j.id, e
		FROM river_job j, unnest(j.errors) AS e
		WHERE j.kind = $1 AND j.errors IS NOT NULL
		  AND j.args->>'provider' = $2 AND j.args->>'event_id' = ANY($3)`
)

// AttemptError is one failed attempt of an event's processing.
type AttemptError struct {
	JobID int64
	rivertype.AttemptError
}

// AttemptErrors returns every failed attempt of the process_event jobs of
// the given events (all their jobs, replays included), oldest first, keyed
// by event id. Events without a failed attempt are absent.
//
// The history is the inbox's own (inbox.Attempts), written with each
// failure, so it outlives River's job rows. River's record on the job rows
// still there adds the attempts the inbox has no entry for: those failed
// before the history was kept, and those whose failure could not be
// recorded (the database refused, or River itself ended the attempt).
func AttemptErrors(ctx context.Context, q inbox.Querier, provider string, eventIDs []string) (map[string][]AttemptError, error) {
	out := map[string][]AttemptError{}
	if len(eventIDs) == 0 {
		return out, nil
	}
	type attemptKey struct {
		jobID   int64
		attempt int
	}
	recorded := map[attemptKey]bool{}
	kept, err := inbox.Attempts(ctx, q, provider, eventIDs)
	if err != nil {
		return nil, err
	}
	for id, attempts := range kept {
		for _, a := range attempts {
			recorded[attemptKey{a.JobID, a.Attempt}] = true
			out[id] = append(out[id], AttemptError{JobID: a.JobID, AttemptError: rivertype.AttemptError{
				At: a.At, Attempt: a.Attempt, Error: a.Error,
			}})
		}
	}
	rows, err := q.Query(ctx, attemptErrorsOfEvents, ProcessEventArgs{}.Kind(), provider, eventIDs)
	if err != nil {
		return nil, fmt.Errorf("read attempt errors: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var eventID string
		var jobID int64
		var raw []byte
		if err := rows.Scan(&eventID, &jobID, &raw); err != nil {
			return nil, fmt.Errorf("read attempt errors: %w", err)
		}
		ae := AttemptError{JobID: jobID}
		if err := json.Unmarshal(raw, &ae.AttemptError); err != nil {
			return nil, fmt.Errorf("decode attempt error of job %d: %w", jobID, err)
		}
		if recorded[attemptKey{jobID, ae.Attempt}] {
			continue
		}
		out[eventID] = append(out[eventID], ae)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read attempt errors: %w", err)
	}
	for _, errs := range out {
		sort.SliceStable(errs, func(i, j int) bool {
			if !errs[i].At.Equal(errs[j].At) {
				return errs[i].At.Before(errs[j].At)
			}
			if errs[i].JobID != errs[j].JobID {
				return errs[i].JobID < errs[j].JobID
			}
			return errs[i].Attempt < errs[j].Attempt
		})
	}
	return out, nil
}

// EventJobs returns which of ids are jobs that apply inbox events
// (process_event, apply_events). Those are changed only by replay and
// discard (ReplayEventTx, DiscardEventTx), which move the inbox row with
// the job and leave an audit entry; a retry, cancel or delete of the job
// alone would leave the two disagreeing, with no one named.
func EventJobs(ctx context.Context, q inbox.Querier, ids []int64) ([]int64, error) {
	rows, err := q.Query(ctx, `SELECT id FROM river_job WHERE id = ANY($1) AND kind = ANY($2) ORDER BY id`,
		ids, eventJobKinds)
	if err != nil {
		return nil, fmt.Errorf("find event jobs: %w", err)
	}
	found, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("find event jobs: %w", err)
	}
	return found, nil
}
