package webhook

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paygate/paygate/inbox"
	"github.com/paygate/paygate/jobs"
)

// Enqueuer inserts process_event jobs in the caller's transaction.
// *jobs.Client is one.
type Enqueuer interface {
	InsertProcessEventTx(ctx context.Context, tx pgx.Tx, provider, eventID string) error
	InsertProcessEventsTx(ctx context.Context, tx pgx.Tx, provider string, eventIDs []string) error
}

var _ Enqueuer = (*jobs.Client)(nil)

// Ingester commits events to the inbox with their processing jobs.
type Ingester interface {
	// Ingest returns only after the event and, when it is new, its job are
	// committed. duplicate reports an event the inbox already had.
	Ingest(ctx context.Context, e Event) (duplicate bool, err error)
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
	err = pgx.BeginFunc(ctx, in.Pool, func(tx pgx.Tx) error {
		created, err := inbox.InsertTx(ctx, tx, toInbox(e))
		if err != nil {
			return err
		}
		duplicate = !created
		if !created {
			return nil
		}
		return in.Enqueue.InsertProcessEventTx(ctx, tx, e.Provider, e.ID)
	})
	if err != nil {
		return false, unavailable(err)
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
