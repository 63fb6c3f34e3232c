package sweep

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/paygate/paygate/jobs"
)

// Querier is what Statuses needs: a pool, a connection or a transaction.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Status is where a provider's sweep stands, as ops see it.
type Status struct {
	Provider string
	// SweptUntil: every event the provider created before it was looked
	// for; nil before the first sweep finished.
	SweptUntil *time.Time
	// Last is the last finished sweep; nil before the first.
	Last *Finished
	// Running is the window a sweep is under way with (or cut off in);
	// nil when none is.
	Running *Window
	// FailingSince is the first failure of the list since its last
	// success, with LastError; nil while the list answers.
	FailingSince *time.Time
	LastError    string
}

// Finished is one finished sweep.
type Finished struct {
	Window
	StartedAt, FinishedAt time.Time
	New, Known            int
	First, Last           *jobs.EmailEvent
}

// Statuses returns the sweeps' statuses, by provider name; a provider never
// swept is absent.
func Statuses(ctx context.Context, q Querier) (map[string]Status, error) {
	rows, err := q.Query(ctx, `SELECT provider, swept_until, window_from, window_to,
			last_from, last_to, last_started_at, last_finished_at, coalesce(last_new, 0), coalesce(last_known, 0),
			last_first, last_last, failing_since, coalesce(last_error, '')
		FROM event_sweeps ORDER BY provider`)
	if err != nil {
		return nil, fmt.Errorf("read the sweeps: %w", err)
	}
	defer rows.Close()
	out := map[string]Status{}
	for rows.Next() {
		var (
			st                         Status
			from, to, lastFrom, lastTo *time.Time
			lastStarted, lastFinished  *time.Time
			lastNew, lastKnown         int
			first, last                []byte
		)
		if err := rows.Scan(&st.Provider, &st.SweptUntil, &from, &to, &lastFrom, &lastTo, &lastStarted, &lastFinished,
			&lastNew, &lastKnown, &first, &last, &st.FailingSince, &st.LastError); err != nil {
			return nil, fmt.Errorf("read the sweeps: %w", err)
		}
		if from != nil && to != nil {
			st.Running = &Window{From: from.UTC(), To: to.UTC()}
		}
		if lastFinished != nil && lastFrom != nil && lastTo != nil {
			f := &Finished{Window: Window{From: lastFrom.UTC(), To: lastTo.UTC()}, FinishedAt: lastFinished.UTC(),
				New: lastNew, Known: lastKnown}
			if lastStarted != nil {
				f.StartedAt = lastStarted.UTC()
			}
			if f.First, err = eventOf(first); err != nil {
				return nil, fmt.Errorf("read the sweeps: %w", err)
			}
			if f.Last, err = eventOf(last); err != nil {
				return nil, fmt.Errorf("read the sweeps: %w", err)
			}
			st.Last = f
		}
		if st.SweptUntil != nil {
			u := st.SweptUntil.UTC()
			st.SweptUntil = &u
		}
		if st.FailingSince != nil {
			f := st.FailingSince.UTC()
			st.FailingSince = &f
		}
		out[st.Provider] = st
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the sweeps: %w", err)
	}
	return out, nil
}
