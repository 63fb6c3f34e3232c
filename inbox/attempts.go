package inbox

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Attempt is one failed attempt at applying an event, kept in the
// append-only inbox_attempts table. River keeps a job's errors only as long
// as the job row, which it deletes after its retention; this history stays.
type Attempt struct {
	Key
	JobID   int64 // the process_event job
	Attempt int   // the job's attempt number, as River counts them
	Error   string
	At      time.Time
}

// RecordAttemptTx appends a to the event's attempt history, in the
// transaction that records the failure on the event (SetStatusTx with
// attempt true). At is the database's clock.
func RecordAttemptTx(ctx context.Context, tx pgx.Tx, a Attempt) error {
	_, err := tx.Exec(ctx, `
		INSERT INTO inbox_attempts (provider, event_id, job_id, attempt, error)
		VALUES ($1, $2, $3, $4, $5)`,
		a.Provider, a.EventID, a.JobID, a.Attempt, a.Error)
	if err != nil {
		return fmt.Errorf("record attempt %d of %s: %w", a.Attempt, a.EventID, err)
	}
	return nil
}

// Attempts returns the failed attempts of the given events, oldest first,
// keyed by event id. Events without one are absent.
func Attempts(ctx context.Context, q Querier, provider string, eventIDs []string) (map[string][]Attempt, error) {
	out := map[string][]Attempt{}
	if len(eventIDs) == 0 {
		return out, nil
	}
	rows, err := q.Query(ctx, `
		SELECT provider, event_id, job_id, attempt, error, at FROM inbox_attempts
		WHERE provider = $1 AND event_id = ANY($2)
		ORDER BY id`, provider, eventIDs)
	if err != nil {
		return nil, fmt.Errorf("read attempts: %w", err)
	}
	attempts, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Attempt, error) {
		var a Attempt
		err := row.Scan(&a.Provider, &a.EventID, &a.JobID, &a.Attempt, &a.Error, &a.At)
		return a, err
	})
	if err != nil {
		return nil, fmt.Errorf("read attempts: %w", err)
	}
	for _, a := range attempts {
		out[a.EventID] = append(out[a.EventID], a)
	}
	return out, nil
}
