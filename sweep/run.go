package sweep

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/paygate/paygate/jobs"
	"github.com/paygate/paygate/provider"
)

// Outcome is how a periodic sweep ended.
type Outcome string

const (
	// OutcomeDone: the window was swept to its end.
	OutcomeDone Outcome = "done"
	// OutcomePaused: the deadline came first; the place is kept and the
	// next run goes on from it.
	OutcomePaused Outcome = "paused"
	// OutcomeFailing: the API was still failing at the deadline; the place
	// is kept, the failure recorded.
	OutcomeFailing Outcome = "failing"
)

// Run is the periodic sweep: it goes on with the window under way, or
// starts one from the end of the last (an overlap before it; FirstWindow
// before now the first time; never before the provider's retention) up to
// now, and sweeps it page by page until its end or deadline, keeping its
// place after each page's events are committed. A failing API is waited
// out with backoff until the deadline, each failure recorded; the
// sweep_failing email goes once the list has failed for AlertAfter. At its
// end the window becomes the last sweep, and its missed_events email is
// queued with it when it found events. Emails are inserted with rc (nil:
// the River client of ctx's job).
//
// It fails only when the database does.
func (s *Sweeper) Run(ctx context.Context, deadline time.Time, rc *river.Client[pgx.Tx]) (Outcome, Result, error) {
	p, err := s.start(ctx)
	if err != nil || p == nil {
		return OutcomeDone, Result{}, err
	}
	failures := 0
	for {
		done, err := s.page(ctx, p)
		var f *failure
		switch {
		case errors.As(err, &f):
			failures++
			if err := s.recordFailure(ctx, rc, f.err); err != nil {
				return OutcomeFailing, p.Result, err
			}
			wait := s.backoff(failures)
			if time.Now().Add(wait).After(deadline) {
				return OutcomeFailing, p.Result, nil
			}
			if err := sleep(ctx, wait); err != nil {
				return OutcomeFailing, p.Result, err
			}
			continue
		case err != nil:
			return OutcomePaused, p.Result, err
		}
		failures = 0
		if done {
			return OutcomeDone, p.Result, s.finish(ctx, rc, p)
		}
		if err := s.keep(ctx, p); err != nil {
			return OutcomePaused, p.Result, err
		}
		if !time.Now().Before(deadline) {
			return OutcomePaused, p.Result, nil
		}
	}
}

// eventJSON is how event_sweeps keeps a first or last event.
func eventJSON(e *jobs.EmailEvent) []byte {
	if e == nil {
		return nil
	}
	b, _ := json.Marshal(e)
	return b
}

func eventOf(b []byte) (*jobs.EmailEvent, error) {
	if len(b) == 0 {
		return nil, nil
	}
	var e jobs.EmailEvent
	if err := json.Unmarshal(b, &e); err != nil {
		return nil, err
	}
	return &e, nil
}

// start returns the place of the window under way, or starts a new one
// ending now; nil when there is nothing to sweep.
func (s *Sweeper) start(ctx context.Context) (*place, error) {
	var p *place
	err := pgx.BeginFunc(ctx, s.cfg.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO event_sweeps (provider) VALUES ($1) ON CONFLICT DO NOTHING`, s.name); err != nil {
			return err
		}
		var (
			sweptUntil, from, to, started *time.Time
			cursor                        *string
			newN, known                   int
			first, last                   []byte
		)
		if err := tx.QueryRow(ctx, `SELECT swept_until, window_from, window_to, cursor, window_started_at,
				window_new, window_known, window_first, window_last
			FROM event_sweeps WHERE provider = $1 FOR UPDATE`, s.name).
			Scan(&sweptUntil, &from, &to, &cursor, &started, &newN, &known, &first, &last); err != nil {
			return err
		}
		if to != nil {
			p = &place{Result: Result{Window: Window{From: from.UTC(), To: to.UTC()}, New: newN, Known: known}}
			if cursor != nil {
				p.Cursor = *cursor
			}
			if started != nil {
				p.StartedAt = *started
			}
			var err error
			if p.First, err = eventOf(first); err != nil {
				return err
			}
			p.Last, err = eventOf(last)
			return err
		}
		now := s.cfg.Now()
		w := s.nextWindow(sweptUntil, now)
		if !w.From.Before(w.To) {
			return nil
		}
		p = &place{Result: Result{Window: w}, StartedAt: now}
		_, err := tx.Exec(ctx, `UPDATE event_sweeps SET window_from = $2, window_to = $3, cursor = NULL,
				window_started_at = $4, window_new = 0, window_known = 0, window_first = NULL, window_last = NULL,
				updated_at = now()
			WHERE provider = $1`, s.name, w.From, w.To, now)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("start the sweep of %s: %w", s.name, err)
	}
	return p, nil
}

// nextWindow is the window a sweep starting at now covers: from an overlap
// before sweptUntil (FirstWindow before now without one), never before the
// provider's retention, to the end of now's second (Stripe's created is in
// seconds: an event of this second is in, a later one is the next
// sweep's).
func (s *Sweeper) nextWindow(sweptUntil *time.Time, now time.Time) Window {
	to := now.Truncate(time.Second).Add(time.Second)
	from := to.Add(-FirstWindow)
	if sweptUntil != nil {
		from = sweptUntil.Add(-Overlap)
	}
	if oldest := now.Add(-s.cfg.Lister.Retention()).Truncate(time.Second).Add(time.Second); from.Before(oldest) {
		from = oldest
	}
	return Window{From: from.UTC(), To: to.UTC()}
}

// keep writes the place after a page whose events are committed; a
// success ends any failure.
func (s *Sweeper) keep(ctx context.Context, p *place) error {
	_, err := s.cfg.Pool.Exec(ctx, `UPDATE event_sweeps SET cursor = nullif($3, ''), window_new = $4, window_known = $5,
			window_first = $6, window_last = $7, failing_since = NULL, last_error = NULL, alerted_at = NULL, updated_at = now()
		WHERE provider = $1 AND window_to = $2`,
		s.name, p.To, p.Cursor, p.New, p.Known, eventJSON(p.First), eventJSON(p.Last))
	if err != nil {
		return fmt.Errorf("keep the sweep's place: %w", err)
	}
	return nil
}

// finish records the swept window as the last sweep, moves swept_until to
// its end, and queues its missed_events email when it found events, in one
// transaction. A window another sweep finished meanwhile is left as it
// is, and its email was that sweep's.
func (s *Sweeper) finish(ctx context.Context, rc *river.Client[pgx.Tx], p *place) error {
	err := pgx.BeginFunc(ctx, s.cfg.Pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE event_sweeps SET
				swept_until = greatest(swept_until, window_to),
				last_from = window_from, last_to = window_to, last_started_at = window_started_at, last_finished_at = $3,
				last_new = $4, last_known = $5, last_first = $6, last_last = $7,
				window_from = NULL, window_to = NULL, cursor = NULL, window_started_at = NULL,
				window_new = 0, window_known = 0, window_first = NULL, window_last = NULL,
				failing_since = NULL, last_error = NULL, alerted_at = NULL, updated_at = now()
			WHERE provider = $1 AND window_to = $2`,
			s.name, p.To, s.cfg.Now(), p.New, p.Known, eventJSON(p.First), eventJSON(p.Last))
		if err != nil || tag.RowsAffected() == 0 || p.New == 0 {
			return err
		}
		return s.enqueueMissedTx(ctx, tx, rc, p, TriggerSchedule)
	})
	if err != nil {
		return fmt.Errorf("finish the sweep of %s: %w", s.name, err)
	}
	s.cfg.Metrics.finished(s.name, s.cfg.Now())
	s.logFound(ctx, p)
	return nil
}

// recordFailure notes a failed list request and, once the list has failed
// for AlertAfter without a success, queues the sweep_failing email, once
// per outage.
func (s *Sweeper) recordFailure(ctx context.Context, rc *river.Client[pgx.Tx], cause error) error {
	s.cfg.Metrics.failed(s.name)
	now := s.cfg.Now()
	var (
		since time.Time
		due   bool
	)
	err := pgx.BeginFunc(ctx, s.cfg.Pool, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `UPDATE event_sweeps SET failing_since = coalesce(failing_since, $2), last_error = $3, updated_at = now()
			WHERE provider = $1
			RETURNING failing_since, alerted_at IS NULL AND failing_since <= $2::timestamptz - make_interval(secs => $4)`,
			s.name, now, cause.Error(), s.cfg.AlertAfter.Seconds()).Scan(&since, &due); err != nil {
			return err
		}
		if !due {
			return nil
		}
		if _, err := tx.Exec(ctx, `UPDATE event_sweeps SET alerted_at = $2 WHERE provider = $1`, s.name, now); err != nil {
			return err
		}
		_, err := jobs.EnqueueEmailsTx(ctx, tx, rc, []jobs.Email{{
			Kind: jobs.EmailSweepFailing, ObjectID: fmt.Sprintf("%s/%d", s.name, since.Unix()),
			Recipient: s.cfg.OpsEmail, Provider: s.name,
			Reason: fmt.Sprintf("failing since %s: %s", since.UTC().Format(time.RFC3339), cause.Error()),
		}})
		return err
	})
	if err != nil {
		return fmt.Errorf("record the sweep's failure: %w", err)
	}
	level := "failing since " + since.UTC().Format(time.RFC3339)
	s.cfg.Logger.WarnContext(ctx, "sweep: listing the provider's events failed; retrying", "provider", s.name,
		"error", cause.Error(), "failing_since", since.UTC().Format(time.RFC3339), "refused", errors.Is(cause, provider.ErrAPIRefused))
	s.cfg.Progress("listing failed, " + level + ": " + cause.Error())
	return nil
}
