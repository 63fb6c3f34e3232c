package natsjs

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"

	"github.com/paygate/paygate/outbox"
)

// Status is where publishing to NATS stands, for the console.
type Status struct {
	// Configured is false when PAYGATE_NATS_URL is not set; nothing else
	// is then filled in.
	Configured bool
	// URL is the server's, without password or token.
	URL, Stream, SubjectPrefix string
	// Connected reports the connection's state at this instance.
	Connected bool
	// Backlog is how many messages wait to be published, OldestSeconds the
	// age of the oldest of them.
	Backlog       int64
	OldestSeconds float64
	// FailingSince is the first failure since the last success (nil while
	// publishing works); LastError the last failure's, kept after a
	// success; AlertedAt when ops were emailed about this outage.
	FailingSince *time.Time
	LastError    string
	AlertedAt    *time.Time
}

// Status reads where publishing stands. A nil Publisher is publishing
// switched off: Status{}.
func (p *Publisher) Status(ctx context.Context) (Status, error) {
	if p == nil {
		return Status{}, nil
	}
	s := Status{Configured: true, URL: redact(p.config.URL), Stream: p.config.Stream, SubjectPrefix: p.config.SubjectPrefix,
		Connected: p.nc.Status() == nats.CONNECTED}
	var err error
	if s.Backlog, s.OldestSeconds, err = outbox.RelayLag(ctx, p.config.Pool, RelayName); err != nil {
		return s, err
	}
	var lastError *string
	err = p.config.Pool.QueryRow(ctx, `SELECT failing_since, last_error, alerted_at FROM message_relays WHERE name = $1`,
		RelayName).Scan(&s.FailingSince, &lastError, &s.AlertedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return s, nil // nothing published yet
	}
	if err != nil {
		return s, fmt.Errorf("nats publisher's status: %w", err)
	}
	if lastError != nil {
		s.LastError = *lastError
	}
	return s, nil
}
