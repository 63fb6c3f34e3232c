// Package sweep owns the missed-event sweep: every few minutes it lists the
// events a provider created (provider.EventLister: Stripe's events list)
// since its last sweep, an overlap before it, and ingests those the inbox
// lacks, so that a payment whose webhook never arrived (a wrong secret
// after a rotation, an outage longer than the provider retries, an
// endpoint disabled at the provider, an acknowledged event lost with a
// database's primary) is in the books within one period, not the next
// day's reconciliation.
//
// Events go through the ingest path the webhooks take (the inbox's dedupe
// on (provider, event id) and its apply_events job), so a webhook that
// arrives later is a duplicate and nothing doubles. A sweep keeps its place
// in event_sweeps, written only after what it fetched committed, so a sweep
// cut off by a failing API or a restart goes on from where it was. A
// failing API only delays it: metrics, logs, and after an hour one email.
//
// This package must never know a provider's payload (the lister decodes
// it), never apply an event, and never bypass the inbox's dedupe. It is
// not the inbox sweeper of package jobs, which re-enqueues stranded inbox
// events.
package sweep

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/paygate/paygate/inbox"
	"github.com/paygate/paygate/jobs"
	"github.com/paygate/paygate/provider"
)

// Defaults of Config.
const (
	// DefaultEvery is how often the periodic sweep runs
	// (PAYGATE_STRIPE_SWEEP_EVERY).
	DefaultEvery = 10 * time.Minute
	// DefaultRate is how many list requests a second a sweep makes at
	// most (PAYGATE_STRIPE_SWEEP_RATE): well under Stripe's 25 a second
	// in test mode and 100 live, shared with everything else the key
	// does.
	DefaultRate = 10
	// Overlap is how far before the end of the last sweep the next one
	// starts: an event can become listable a little after its created
	// time, and the clocks of paygate and the provider differ.
	Overlap = 10 * time.Minute
	// FirstWindow is what the first sweep of a provider covers.
	FirstWindow = 24 * time.Hour
	// DefaultAlertAfter is how long the list must fail without a success
	// before ops get one sweep_failing email.
	DefaultAlertAfter = time.Hour
	// DefaultBackoff is the wait after a failed list request, doubled
	// after each further failure up to DefaultMaxBackoff.
	DefaultBackoff    = time.Second
	DefaultMaxBackoff = time.Minute
)

// Triggers: what ran a sweep, as its missed_events email says.
const (
	TriggerSchedule = "schedule"
	TriggerCLI      = "cli"
)

// Errors.
var (
	// ErrWindow: a window that is not within the provider's list (its
	// retention up to now), or that ends before it starts.
	ErrWindow = errors.New("invalid sweep window")
	// ErrNoProgress: the provider's list answered a page with more to
	// come but the same cursor again; following it would never end.
	ErrNoProgress = errors.New("the events list did not move past its cursor")
)

// Ingester commits events to the inbox with their apply job, as the
// webhook endpoint does: *webhook.TxIngester is one. duplicate[i] reports
// that events[i] was already in the inbox; the inbox's unique key decides.
type Ingester interface {
	IngestAll(ctx context.Context, events []provider.Event) (duplicate []bool, err error)
}

// Config configures a Sweeper.
type Config struct {
	Pool *pgxpool.Pool
	// Lister lists the provider's events; its Name is the provider swept.
	Lister provider.EventLister
	// Ingester commits the events the inbox lacks.
	Ingester Ingester
	// Rate bounds the list requests a second; DefaultRate when zero.
	Rate float64
	// AlertAfter, Backoff and MaxBackoff: see the defaults; zero takes
	// them.
	AlertAfter time.Duration
	Backoff    time.Duration
	MaxBackoff time.Duration
	// OpsEmail receives the missed_events and sweep_failing emails.
	OpsEmail string
	Logger   *slog.Logger
	// Metrics, when set, counts what sweeps find (NewMetrics).
	Metrics *Metrics
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// Progress, when set, is told what a sweep does, a line per page.
	Progress func(msg string)
}

// Sweeper sweeps one provider's events list.
type Sweeper struct {
	cfg     Config
	name    string
	limiter *limiter
}

// New returns a Sweeper.
func New(cfg Config) *Sweeper {
	if cfg.Rate <= 0 {
		cfg.Rate = DefaultRate
	}
	if cfg.AlertAfter <= 0 {
		cfg.AlertAfter = DefaultAlertAfter
	}
	if cfg.Backoff <= 0 {
		cfg.Backoff = DefaultBackoff
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = DefaultMaxBackoff
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Progress == nil {
		cfg.Progress = func(string) {}
	}
	return &Sweeper{cfg: cfg, name: cfg.Lister.Name(), limiter: newLimiter(cfg.Rate)}
}

// Provider is the name of the provider swept.
func (s *Sweeper) Provider() string { return s.name }

// Window is a range of events' creation times, [From, To).
type Window struct {
	From, To time.Time
}

// Result is what one sweep of a window found.
type Result struct {
	Window
	// Listed counts the events the provider listed in the window; New
	// those the sweep ingested, Known those the inbox had. Unreadable
	// counts listed items no event could be decoded from (not stored).
	Listed, New, Known, Unreadable int
	// First and Last are the oldest and the newest of the new events by
	// creation; nil when there are none.
	First, Last *jobs.EmailEvent
	// Requests counts the list requests made, failed ones included.
	Requests int
}

// place is where a sweep of a window stands: the cursor after the last
// page whose events are committed, and what it found so far.
type place struct {
	Result
	Cursor    string
	StartedAt time.Time
}

// failure is an API failure of one list request, as the loop reports it.
type failure struct{ err error }

func (f *failure) Error() string { return f.err.Error() }
func (f *failure) Unwrap() error { return f.err }

// page lists and ingests one page at p, moving p past it. A failed list
// request is returned as *failure (the provider's API is at fault, the
// place has not moved); any other error is the database's.
func (s *Sweeper) page(ctx context.Context, p *place) (done bool, err error) {
	if err := s.limiter.wait(ctx); err != nil {
		return false, err
	}
	p.Requests++
	pg, err := s.cfg.Lister.ListEvents(ctx, provider.EventQuery{From: p.From, To: p.To, After: p.Cursor})
	if err != nil {
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		return false, &failure{err: err}
	}
	if pg.Next != "" && pg.Next == p.Cursor {
		return false, &failure{err: fmt.Errorf("%w: %s", ErrNoProgress, p.Cursor)}
	}
	// Only the window's events: a list that ignored the filter (a stub
	// answering fixtures) must not bring in events of another time.
	events := make([]provider.Event, 0, len(pg.Events))
	for _, ev := range pg.Events {
		if !ev.Created.Before(p.From) && ev.Created.Before(p.To) {
			events = append(events, ev)
		}
	}
	for _, u := range pg.Unreadable {
		s.cfg.Logger.WarnContext(ctx, "sweep: a listed event is not one paygate can store; left out",
			"provider", s.name, "event_id", u.ID, "error", u.Err.Error())
	}
	fresh, err := s.ingestMissing(ctx, events)
	if err != nil {
		return false, err
	}
	p.Listed += len(events)
	p.Unreadable += len(pg.Unreadable)
	p.New += len(fresh)
	p.Known += len(events) - len(fresh)
	for _, ev := range fresh {
		e := jobs.EmailEvent{ID: ev.ID, Type: ev.Type, Created: ev.Created.UTC()}
		if p.First == nil || earlier(e, *p.First) {
			p.First = &e
		}
		if p.Last == nil || earlier(*p.Last, e) {
			p.Last = &e
		}
	}
	s.cfg.Metrics.count(s.name, len(fresh), len(events)-len(fresh))
	s.cfg.Progress(fmt.Sprintf("page %d: %d events listed, %d new, %d known (so far %d listed, %d new)",
		p.Requests, len(events), len(fresh), len(events)-len(fresh), p.Listed, p.New))
	p.Cursor = pg.Next
	return pg.Next == "", nil
}

// earlier orders events by creation, then id.
func earlier(a, b jobs.EmailEvent) bool {
	if !a.Created.Equal(b.Created) {
		return a.Created.Before(b.Created)
	}
	return a.ID < b.ID
}

// ingestMissing ingests the events the inbox lacks and returns them. The
// inbox is asked first, reading only keys, so a sweep that finds nothing
// writes nothing; what it lacks goes in one transaction, where its unique
// key decides again: a webhook committed meanwhile makes its copy a
// duplicate, counted known.
func (s *Sweeper) ingestMissing(ctx context.Context, events []provider.Event) ([]provider.Event, error) {
	if len(events) == 0 {
		return nil, nil
	}
	keys := make([]inbox.Key, len(events))
	for i, ev := range events {
		keys[i] = inbox.Key{Provider: ev.Provider, EventID: ev.ID}
	}
	known, err := inbox.KeyStatuses(ctx, s.cfg.Pool, keys)
	if err != nil {
		return nil, fmt.Errorf("look up the listed events: %w", err)
	}
	var missing []provider.Event
	for i, ev := range events {
		if _, ok := known[keys[i]]; !ok {
			missing = append(missing, ev)
		}
	}
	if len(missing) == 0 {
		return nil, nil
	}
	dup, err := s.cfg.Ingester.IngestAll(ctx, missing)
	if err != nil {
		return nil, fmt.Errorf("ingest %d missed events: %w", len(missing), err)
	}
	fresh := missing[:0]
	for i, ev := range missing {
		if !dup[i] {
			fresh = append(fresh, ev)
		}
	}
	return fresh, nil
}

// backoff is the wait after the n-th failure in a row (from 1).
func (s *Sweeper) backoff(n int) time.Duration {
	d := s.cfg.Backoff
	for i := 1; i < n && d < s.cfg.MaxBackoff; i++ {
		d *= 2
	}
	return min(d, s.cfg.MaxBackoff)
}

// CheckWindow checks that w is within what the provider lists at now: not
// before its retention, not after now, and not empty. It fails with
// ErrWindow.
func (s *Sweeper) CheckWindow(w Window, now time.Time) error {
	oldest := now.Add(-s.cfg.Lister.Retention())
	switch {
	case !w.From.Before(w.To):
		return fmt.Errorf("%w: it must end after it starts", ErrWindow)
	case w.From.Before(oldest):
		return fmt.Errorf("%w: %s lists the events of the last %s only: start at %s or later",
			ErrWindow, s.name, days(s.cfg.Lister.Retention()), oldest.UTC().Format(time.RFC3339))
	case w.To.After(now.Add(time.Second)):
		return fmt.Errorf("%w: it ends in the future", ErrWindow)
	}
	return nil
}

func days(d time.Duration) string {
	if d%(24*time.Hour) == 0 {
		return fmt.Sprintf("%d days", d/(24*time.Hour))
	}
	return d.String()
}

// SweepWindow sweeps w once, now, as `paygate sweep` does: every page,
// waiting out a failing API with backoff (telling Progress) until ctx
// ends, then, when it found events, one missed_events email (inserted with
// rc). It neither reads nor moves the periodic sweep's place. It fails
// with ErrWindow, with the API's error when the provider refuses the
// request (provider.ErrAPIRefused), or when ctx ends.
func (s *Sweeper) SweepWindow(ctx context.Context, w Window, rc *river.Client[pgx.Tx]) (Result, error) {
	if err := s.CheckWindow(w, s.cfg.Now()); err != nil {
		return Result{}, err
	}
	p := &place{Result: Result{Window: w}, StartedAt: s.cfg.Now()}
	failures := 0
	for {
		done, err := s.page(ctx, p)
		var f *failure
		if errors.As(err, &f) {
			s.cfg.Metrics.failed(s.name)
			if errors.Is(f.err, provider.ErrAPIRefused) {
				return p.Result, f.err
			}
			failures++
			wait := s.backoff(failures)
			s.cfg.Progress(fmt.Sprintf("listing failed (%v); trying again in %s", f.err, wait))
			if err := sleep(ctx, wait); err != nil {
				return p.Result, fmt.Errorf("%w (last failure: %w)", err, f.err)
			}
			continue
		}
		if err != nil {
			return p.Result, err
		}
		failures = 0
		if done {
			break
		}
	}
	if p.New > 0 {
		err := pgx.BeginFunc(ctx, s.cfg.Pool, func(tx pgx.Tx) error {
			return s.enqueueMissedTx(ctx, tx, rc, p, TriggerCLI)
		})
		if err != nil {
			return p.Result, err
		}
	}
	s.logFound(ctx, p)
	return p.Result, nil
}

// enqueueMissedTx queues the missed_events email of p's findings, once per
// provider and window.
func (s *Sweeper) enqueueMissedTx(ctx context.Context, tx pgx.Tx, rc *river.Client[pgx.Tx], p *place, trigger string) error {
	_, err := jobs.EnqueueEmailsTx(ctx, tx, rc, []jobs.Email{{
		Kind:      jobs.EmailMissedEvents,
		ObjectID:  fmt.Sprintf("%s/%d-%d", s.name, p.From.Unix(), p.To.Unix()),
		Recipient: s.cfg.OpsEmail,
		Provider:  s.name,
		Missed: &jobs.MissedEvents{Count: p.New, First: *p.First, Last: *p.Last,
			From: p.From.UTC(), To: p.To.UTC(), Known: p.Known, Trigger: trigger},
	}})
	return err
}

func (s *Sweeper) logFound(ctx context.Context, p *place) {
	if p.New == 0 {
		s.cfg.Logger.InfoContext(ctx, "sweep: nothing missed", "provider", s.name, "listed", p.Listed,
			"from", p.From.UTC().Format(time.RFC3339), "to", p.To.UTC().Format(time.RFC3339))
		return
	}
	s.cfg.Logger.WarnContext(ctx, "sweep: events whose webhooks never arrived were ingested", "provider", s.name,
		"new", p.New, "known", p.Known, "first", p.First.ID, "last", p.Last.ID,
		"from", p.From.UTC().Format(time.RFC3339), "to", p.To.UTC().Format(time.RFC3339))
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// limiter gives requests slots 1/rate apart, whichever sweep of the
// process makes them: at most rate in any second, though a request that
// woke late for its slot may go less than 1/rate before the next.
type limiter struct {
	every time.Duration
	mu    sync.Mutex
	next  time.Time
}

func newLimiter(rate float64) *limiter {
	return &limiter{every: time.Duration(float64(time.Second) / rate)}
}

// wait returns when the next request may go, or when ctx ends.
func (l *limiter) wait(ctx context.Context) error {
	l.mu.Lock()
	now := time.Now()
	at := now
	if l.next.After(now) {
		at = l.next
	}
	l.next = at.Add(l.every)
	l.mu.Unlock()
	return sleep(ctx, at.Sub(now))
}
