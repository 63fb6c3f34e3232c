package outbox

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// messages is partitioned by month of created_at (migration 0016), like
// the inbox, so that messages past PAYGATE_MESSAGE_RETENTION leave by
// dropping a month whole rather than by a DELETE that scans and bloats.
// Both go through the migration's SECURITY DEFINER functions: serve logs
// in as paygate_app, which owns nothing.

// DefaultRetention is how long messages are kept by default: Stripe keeps
// its events 30 days.
const DefaultRetention = 30 * 24 * time.Hour

// partitionsAhead is how many months after the current one keep a
// partition ready.
const partitionsAhead = 3

// EnsurePartitions creates the partitions of the months after now's that do
// not exist yet, and returns their names.
func EnsurePartitions(ctx context.Context, q Querier, now time.Time) ([]string, error) {
	var created []string
	month := time.Date(now.UTC().Year(), now.UTC().Month(), 1, 0, 0, 0, 0, time.UTC)
	for i := 1; i <= partitionsAhead; i++ {
		m := month.AddDate(0, i, 0)
		var made bool
		if err := q.QueryRow(ctx, `SELECT paygate_message_partition_create($1::date)`, m.Format(time.DateOnly)).Scan(&made); err != nil {
			return created, fmt.Errorf("create message partition for %s: %w", m.Format("2006-01"), err)
		}
		if made {
			created = append(created, fmt.Sprintf("messages_%04d_%02d", m.Year(), int(m.Month())))
		}
	}
	return created, nil
}

// Dropped is what DropExpired did with one month past the retention.
type Dropped struct {
	Partition string
	Messages  int64 // dropped with it; zero when it was kept
	// Pending counts what keeps it: deliveries still pending, and
	// messages a relay (a broker's publisher) has not handed on yet.
	Pending int64
}

// DropExpired drops every monthly partition whose messages were all
// created before keepFrom, with their deliveries, each in a short
// transaction of its own. A month with a delivery still pending anywhere
// (an endpoint failing, or disabled, keeps its messages until they left),
// or a message a relay has not handed on (a broker down), is kept and
// reported with its Pending count; the next run tries again.
func DropExpired(ctx context.Context, db interface {
	Querier
	Begin(context.Context) (pgx.Tx, error)
}, keepFrom time.Time) ([]Dropped, error) {
	rows, err := db.Query(ctx, `
		SELECT c.relname
		FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		CROSS JOIN LATERAL (SELECT pg_get_expr(c.relpartbound, c.oid) AS bound) b
		WHERE i.inhparent = 'messages'::regclass AND b.bound <> 'DEFAULT'
		  AND substring(b.bound FROM 'TO \(''([^'']+)''\)')::timestamptz <= $1
		ORDER BY 1`, keepFrom)
	if err != nil {
		return nil, fmt.Errorf("list message partitions: %w", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("list message partitions: %w", err)
	}
	var out []Dropped
	for _, name := range names {
		var n int64
		err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
			// Detaching takes the parent's strongest lock: give up rather
			// than stall applying behind a long transaction.
			if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '5s'`); err != nil {
				return err
			}
			return tx.QueryRow(ctx, `SELECT paygate_message_partition_drop($1, $2)`, name, keepFrom).Scan(&n)
		})
		if err != nil {
			return out, fmt.Errorf("drop message partition %s: %w", name, err)
		}
		d := Dropped{Partition: name}
		if n < 0 {
			d.Pending = -n
		} else {
			d.Messages = n
		}
		out = append(out, d)
	}
	return out, nil
}
