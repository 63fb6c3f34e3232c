package jobs

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/internal/testdb"
)

// TestMarkingEmailsIsHeapOnly: marking emails sent, skipped or failed is a
// heap-only update of each row (no index entry, the row's new version on
// its own page): no index names the status, and each page of emails has
// room for its rows' new versions. An applied batch's sixty emails, marked
// as its send_emails job marks them, in one statement.
func TestMarkingEmailsIsHeapOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.New(t)
	client, err := NewClient(pool, Config{InsertOnly: true})
	require.NoError(t, err)

	const n = 60
	emails := make([]Email, n)
	for i := range emails {
		id := fmt.Sprintf("pi_mark_%02d", i)
		emails[i] = Email{Kind: EmailPaymentReceipt, ObjectID: id, PaymentID: id, Recipient: "buyer@example.test",
			Amount: "12.50", Currency: "eur"}
	}
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := EnqueueEmailsTx(ctx, tx, client.River, emails)
		return err
	}))
	rows, err := pool.Query(ctx, `SELECT id FROM email_outbox ORDER BY id`)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	require.Len(t, ids, n)

	outcomes := make([]emailOutcome, n)
	for i, id := range ids {
		outcomes[i] = emailOutcome{row: outboxRow{ID: id}, status: EmailSent, tried: true}
		switch i % 3 {
		case 1:
			outcomes[i].status, outcomes[i].tried, outcomes[i].reason = EmailSkipped, false, "no recipient"
		case 2:
			outcomes[i].status, outcomes[i].reason = EmailFailed, "550 mailbox unavailable"
		}
	}
	var updated, heapOnly int
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := markEmailOutcomes(ctx, tx, outcomes); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_xact_user_tables
			WHERE relname = 'email_outbox'`).Scan(&updated, &heapOnly)
	}))
	require.Equal(t, n, updated)
	require.Equal(t, n, heapOnly, "every mark is heap-only")
}
