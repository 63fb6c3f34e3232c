package main

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/internal/mailpit"
	"github.com/paygate/paygate/internal/reliability"
	"github.com/paygate/paygate/internal/stripesim"
	"github.com/paygate/paygate/internal/testdb"
)

// TestDoubleChargeEmailSurvivesSIGKILL: an order paid twice is detected in
// the transaction that applies the second payment, and the email to ops
// leaves through the email outbox: a gateway killed (SIGKILL) after that
// commit and before any email got out sends nothing twice and loses
// nothing — its successor sends the one email, and detects nothing again.
func TestDoubleChargeEmailSurvivesSIGKILL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, dbURL := testdb.NewWithURL(t)
	bin, err := reliability.Binary(ctx)
	require.NoError(t, err)
	require.NoError(t, reliability.Migrate(ctx, bin, dbURL))
	pool, err := pgxpool.New(ctx, dbURL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	// Nothing listens here: the first gateway's sends are refused, so no
	// email leaves before the kill.
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	deadAddr := dead.Addr().String()
	require.NoError(t, dead.Close())

	sim := stripesim.New(stripesim.Config{})
	env := []string{
		"PAYGATE_STRIPE_WEBHOOK_SECRETS=" + sim.WebhookSecret(),
		"PAYGATE_EMAIL_FROM=paygate@example.test",
		"PAYGATE_OPS_EMAIL=ops@example.test",
		"PAYGATE_RECONCILE_AT=0 0 1 1 *",
	}
	first, err := reliability.NewGateway(reliability.GatewayConfig{Binary: bin, DatabaseURL: dbURL,
		Env: append(env, "PAYGATE_SMTP_URL=smtp://"+deadAddr)})
	require.NoError(t, err)
	require.NoError(t, first.Start(ctx))
	t.Cleanup(first.Stop)

	order := fmt.Sprintf("ord-crash-%d", time.Now().UnixNano())
	sim.Pay(stripesim.PayOpts{Amount: 4500, Currency: "usd", OrderID: order})
	sim.Pay(stripesim.PayOpts{Amount: 4500, Currency: "usd", OrderID: order})
	_, err = sim.Deliver(ctx, first.WebhookURL(), sim.Events(), nil)
	require.NoError(t, err)

	// The detection committed, and its email was tried, refused, and is
	// waiting for its next try (a job killed while running would wait for
	// its timeout to be rescued, which proves the same, only slower).
	require.Eventually(t, func() bool {
		var tried bool
		err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM email_outbox o JOIN double_charges d
			ON d.reference = o.data->>'reference' AND d.state = 'open'
			WHERE o.kind = 'double_charge' AND o.status = 'pending')
			AND EXISTS (SELECT FROM river_job WHERE kind IN ('send_email', 'send_emails') AND state = 'retryable')`).Scan(&tried)
		return err == nil && tried
	}, 30*time.Second, 5*time.Millisecond, "the double charge was never detected and tried")
	require.NoError(t, first.Kill())

	mail := mailpit.Start(t)
	second, err := reliability.NewGateway(reliability.GatewayConfig{Binary: bin, DatabaseURL: dbURL,
		Env: append(env, "PAYGATE_SMTP_URL="+mail.SMTPURL())})
	require.NoError(t, err)
	require.NoError(t, second.Start(ctx))
	t.Cleanup(second.Stop)
	// Stripe delivers again after the outage: nothing new may come of it.
	_, err = sim.Deliver(ctx, second.WebhookURL(), sim.Events(), nil)
	require.NoError(t, err)

	var alerts []mailpit.Message
	require.Eventually(t, func() bool {
		alerts = nil
		for _, m := range mail.Messages(t) {
			if strings.Contains(m.Subject, order) {
				alerts = append(alerts, m)
			}
		}
		return len(alerts) > 0
	}, 60*time.Second, 100*time.Millisecond, "the double charge's email never left")
	time.Sleep(2 * time.Second) // a second copy would have left by now
	alerts = alerts[:0]
	for _, m := range mail.Messages(t) {
		if strings.Contains(m.Subject, order) {
			alerts = append(alerts, m)
		}
	}
	require.Len(t, alerts, 1)
	require.Equal(t, "ops@example.test", alerts[0].To[0].Address)
	require.Contains(t, alerts[0].Subject, "charged 2 times")

	var detections int
	var status string
	require.NoError(t, pool.QueryRow(ctx, `SELECT d.detections, o.status FROM double_charges d
		JOIN email_outbox o ON o.kind = 'double_charge' AND o.data->>'reference' = d.reference
		WHERE d.reference = $1`, order).Scan(&detections, &status))
	require.Equal(t, 1, detections)
	require.Equal(t, "sent", status)
}
