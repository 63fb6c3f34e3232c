package inbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// inbox_events is partitioned by month of received_at (migration 0013):
// one partition per UTC month, the partition holding everything before the
// first month (the table as it was before partitioning), and a DEFAULT
// partition for any row no month covers yet. Creating and dropping
// partitions needs the tables' owner; serve logs in as paygate_app, so both
// go through the two SECURITY DEFINER functions of that migration, which
// are all the app may do to the table's shape.

// PartitionsAhead is how many months after the current one keep a
// partition ready.
const PartitionsAhead = 3

// Partition is one partition of inbox_events.
type Partition struct {
	Name string
	// From and To bound received_at, To excluded; From is zero for the
	// partition that starts at the beginning of time, both are zero for the
	// DEFAULT partition.
	From, To time.Time
	Default  bool
}

// Partitions lists the partitions of inbox_events, oldest first, the
// DEFAULT partition last.
func Partitions(ctx context.Context, q Querier) ([]Partition, error) {
	rows, err := q.Query(ctx, `
		SELECT c.relname, b.bound = 'DEFAULT',
			substring(b.bound FROM 'FROM \(''([^'']+)''\)')::timestamptz,
			substring(b.bound FROM 'TO \(''([^'']+)''\)')::timestamptz
		FROM pg_inherits i
		JOIN pg_class c ON c.oid = i.inhrelid
		CROSS JOIN LATERAL (SELECT pg_get_expr(c.relpartbound, c.oid) AS bound) b
		WHERE i.inhparent = 'inbox_events'::regclass
		ORDER BY b.bound = 'DEFAULT', 4 NULLS LAST`)
	if err != nil {
		return nil, fmt.Errorf("list inbox partitions: %w", err)
	}
	parts, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Partition, error) {
		var (
			p        Partition
			from, to *time.Time
		)
		if err := row.Scan(&p.Name, &p.Default, &from, &to); err != nil {
			return p, err
		}
		if from != nil {
			p.From = from.UTC()
		}
		if to != nil {
			p.To = to.UTC()
		}
		return p, nil
	})
	if err != nil {
		return nil, fmt.Errorf("list inbox partitions: %w", err)
	}
	return parts, nil
}

// EnsurePartitions creates the partitions of the PartitionsAhead months
// after now's (UTC) that do not exist yet, and returns their names. A month
// that has begun is never created: its rows may already be in the DEFAULT
// partition, which holds them for good.
func EnsurePartitions(ctx context.Context, q Querier, now time.Time) ([]string, error) {
	var created []string
	month := time.Date(now.UTC().Year(), now.UTC().Month(), 1, 0, 0, 0, 0, time.UTC)
	for i := 1; i <= PartitionsAhead; i++ {
		m := month.AddDate(0, i, 0)
		var made bool
		if err := q.QueryRow(ctx, `SELECT paygate_inbox_partition_create($1::date)`, m.Format(time.DateOnly)).Scan(&made); err != nil {
			return created, fmt.Errorf("create inbox partition for %s: %w", m.Format("2006-01"), err)
		}
		if made {
			created = append(created, PartitionName(m))
		}
	}
	return created, nil
}

// PartitionName is the name of month's partition.
func PartitionName(month time.Time) string {
	return fmt.Sprintf("inbox_events_%04d_%02d", month.Year(), int(month.Month()))
}

// Expired is what DropExpired did with one partition past the retention.
type Expired struct {
	Partition
	// Dropped is how many events left with the partition; zero when it was
	// kept.
	Dropped int64
	// Open is how many of its events wait to be applied or for ops
	// (received or poison): a partition with any is kept, so that nothing
	// unresolved is ever dropped.
	Open int64
}

// ErrPartitionOpen is DropExpired's error when a partition past the
// retention was kept because it holds unresolved events.
var ErrPartitionOpen = errors.New("inbox partition past its retention holds unresolved events")

// DropExpired detaches and drops every partition whose events were all
// received before keepFrom, each in its own short transaction, and takes
// their rows out of Counts. The dedupe keys stay (inbox_event_keys is kept
// forever): a provider retrying a dropped event is still told it is a
// duplicate. The ledger, payments and attempt history are untouched.
//
// A partition holding a received or poison event is kept, reported with
// its Open count, and the error wraps ErrPartitionOpen once the others are
// done: ops resolve those events (replay or discard) and the next run
// drops it.
func DropExpired(ctx context.Context, db interface {
	Querier
	Begin(context.Context) (pgx.Tx, error)
}, keepFrom time.Time) ([]Expired, error) {
	parts, err := Partitions(ctx, db)
	if err != nil {
		return nil, err
	}
	var (
		out  []Expired
		open error
	)
	for _, p := range parts {
		if p.Default || p.To.IsZero() || p.To.After(keepFrom) {
			continue
		}
		var n int64
		err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
			// Detaching takes the parent's strongest lock: give up rather
			// than stall ingest behind a long transaction; the next run
			// tries again.
			if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '5s'`); err != nil {
				return err
			}
			return tx.QueryRow(ctx, `SELECT paygate_inbox_partition_drop($1, $2)`, p.Name, keepFrom).Scan(&n)
		})
		if err != nil {
			return out, fmt.Errorf("drop inbox partition %s: %w", p.Name, err)
		}
		e := Expired{Partition: p}
		if n < 0 {
			e.Open = -n
			open = fmt.Errorf("%s keeps %d: %w", p.Name, e.Open, ErrPartitionOpen)
		} else {
			e.Dropped = n
		}
		out = append(out, e)
	}
	return out, open
}
