package webhook

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace"

	"github.com/paygate/paygate/inbox"
	"github.com/paygate/paygate/jobs"
)

// Enqueuer inserts, in the caller's transaction, the job that applies the
// new events of one transaction (apply_events). *jobs.Client is one.
type Enqueuer interface {
	InsertApplyEventsTx(ctx context.Context, tx pgx.Tx, provider string, eventIDs []string) error
}

// LinkedEnqueuer is an Enqueuer that also keeps, with the job, the span
// each event was received in (ingest[i] for eventIDs[i]), so that the span
// of the batch that applies the events can link to each of them.
// *jobs.Client is one. Without tracing, the plain InsertApplyEventsTx is
// called.
type LinkedEnqueuer interface {
	InsertApplyEventsLinkedTx(ctx context.Context, tx pgx.Tx, provider string, eventIDs []string, ingest []trace.SpanContext) error
}

var (
	_ Enqueuer       = (*jobs.Client)(nil)
	_ LinkedEnqueuer = (*jobs.Client)(nil)
)

// Ingester commits events to the inbox with their processing jobs.
type Ingester interface {
	// Ingest returns only after the event and, when it is new, its job are
	// committed. duplicate reports an event the inbox already had.
	Ingest(ctx context.Context, e Event) (duplicate bool, err error)
	// IngestAll commits events, the events of one request (an Adyen batch),
	// together: all of them and the jobs of the new ones, or none.
	// duplicate[i] reports that events[i] was already in the inbox (or is a
	// later copy of an earlier one in events).
	IngestAll(ctx context.Context, events []Event) (duplicate []bool, err error)
}

// TxIngester commits each event in a transaction of its own.
type TxIngester struct {
	Pool    *pgxpool.Pool
	Enqueue Enqueuer
}

// Ingest implements Ingester.
//
// It fails with an error wrapping ErrUnavailable when the database cannot
// commit; nothing is then acknowledged.
func (in *TxIngester) Ingest(ctx context.Context, e Event) (duplicate bool, err error) {
	dup, err := in.IngestAll(ctx, []Event{e})
	if err != nil {
		return false, err
	}
	return dup[0], nil
}

// IngestAll implements Ingester, in one transaction.
//
// It fails with an error wrapping ErrUnavailable when the database cannot
// commit; nothing is then acknowledged.
func (in *TxIngester) IngestAll(ctx context.Context, events []Event) (duplicate []bool, err error) {
	var spans []trace.SpanContext
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		spans = make([]trace.SpanContext, len(events))
		for i := range spans {
			spans[i] = sc
		}
	}
	err = pgx.BeginFunc(ctx, in.Pool, func(tx pgx.Tx) error {
		duplicate, err = insertTx(ctx, tx, in.Enqueue, events, spans)
		return err
	})
	if err != nil {
		return nil, unavailable(err)
	}
	return duplicate, nil
}

// insertTx stores events with one multi-row insert, and the job of the new
// ones with one insert per provider, in tx. duplicate[i] reports that
// events[i] is not the first copy of an event the inbox did not have.
// spans[i], when spans is not nil (tracing is on), is the span events[i]
// was received in, kept with its job.
func insertTx(ctx context.Context, tx pgx.Tx, enqueue Enqueuer, events []Event, spans []trace.SpanContext) (duplicate []bool, err error) {
	rows := make([]inbox.Event, len(events))
	for i, e := range events {
		rows[i] = toInbox(e)
	}
	created, err := inbox.InsertManyTx(ctx, tx, rows)
	if err != nil {
		return nil, err
	}
	fresh := map[string][]string{}
	var freshSpans map[string][]trace.SpanContext
	if spans != nil {
		freshSpans = map[string][]trace.SpanContext{}
	}
	duplicate = make([]bool, len(events))
	for i, c := range created {
		duplicate[i] = !c
		if c {
			fresh[events[i].Provider] = append(fresh[events[i].Provider], events[i].ID)
			if spans != nil {
				freshSpans[events[i].Provider] = append(freshSpans[events[i].Provider], spans[i])
			}
		}
	}
	linked, _ := enqueue.(LinkedEnqueuer)
	providers := make([]string, 0, len(fresh))
	for p := range fresh {
		providers = append(providers, p)
	}
	sort.Strings(providers)
	for _, p := range providers {
		if linked != nil && freshSpans != nil {
			err = linked.InsertApplyEventsLinkedTx(ctx, tx, p, fresh[p], freshSpans[p])
		} else {
			err = enqueue.InsertApplyEventsTx(ctx, tx, p, fresh[p])
		}
		if err != nil {
			return nil, err
		}
	}
	return duplicate, nil
}

func toInbox(e Event) inbox.Event {
	ie := inbox.Event{
		Provider:   e.Provider,
		EventID:    e.ID,
		Type:       e.Type,
		Livemode:   e.Livemode,
		APIVersion: e.APIVersion,
		Payload:    e.Payload,
		Source:     inbox.Source(e.Source),
	}
	if !e.Created.IsZero() {
		t := e.Created
		ie.ProviderCreatedAt = &t
	}
	return ie
}

// unavailable marks a failed commit as the database's fault, keeping the
// cause for the log. A caller's cancelled request stays a cancellation.
func unavailable(err error) error {
	if errors.Is(err, context.Canceled) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrUnavailable, err)
}

// ingestTimeout bounds one commit: a database that does not answer must give
// the provider a quick 503 (it will retry), never a hung connection.
const ingestTimeout = 5 * time.Second
