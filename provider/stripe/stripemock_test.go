package stripe_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v79"

	"github.com/paygate/paygate/internal/stripemock"
	striperef "github.com/paygate/paygate/provider/stripe"
)

// TestStripeRequestShapesAgainstStripeMock runs every stripe-go call the
// reconciliation makes against stripe-mock, which validates each request
// against Stripe's OpenAPI specification and refuses unknown or ill-typed
// parameters: the created range, page size, cursor, source and payout
// filters are requests Stripe accepts.
func TestStripeRequestShapesAgainstStripeMock(t *testing.T) {
	t.Parallel()
	base, logs := stripemock.Start(t)
	ctx := context.Background()

	// stripe-mock really validates: an unknown parameter and an ill-typed
	// range are refused, so the acceptances below mean something.
	for _, q := range []string{"bogus=1", "created%5Bgte%5D=yesterday", "limit=ten"} {
		req, _ := http.NewRequest(http.MethodGet, base+"/v1/balance_transactions?"+q, nil)
		req.SetBasicAuth("sk_test_123", "")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, q)
	}

	p, err := striperef.NewAPI(striperef.APIConfig{APIKey: "sk_test_123", URL: base, MaxNetworkRetries: stripe.Int64(0)})
	require.NoError(t, err)
	from := time.Date(2025, 3, 14, 0, 0, 0, 0, time.UTC)
	to := from.AddDate(0, 0, 1)

	bts, err := p.BalanceTransactions(ctx, from, to)
	require.NoError(t, err, stripemock.Tail(logs.String()))
	require.NotEmpty(t, bts)
	require.NotEmpty(t, bts[0].ID)
	require.NotEmpty(t, bts[0].Currency)

	_, err = p.BalanceTransactionsBySource(ctx, "ch_123")
	require.NoError(t, err, stripemock.Tail(logs.String()))
	_, err = p.PayoutTransactions(ctx, "po_123")
	require.NoError(t, err, stripemock.Tail(logs.String()))
	_, found, err := p.BalanceTransaction(ctx, "txn_123")
	require.NoError(t, err, stripemock.Tail(logs.String()))
	require.True(t, found)

	events, err := p.Events(ctx, from, to)
	require.NoError(t, err, stripemock.Tail(logs.String()))
	require.NotEmpty(t, events)
	for _, ev := range events {
		var head struct {
			ID     string `json:"id"`
			Object string `json:"object"`
		}
		require.NoError(t, json.Unmarshal(ev.Payload, &head))
		require.Equal(t, ev.ID, head.ID)
		require.Equal(t, "event", head.Object)
	}

	// The requests went out as Stripe expects them: the day as a created
	// range, pages of 100, and the filters by name. stripe-mock's log
	// reaches us through a pipe: give it a moment.
	wants := []string{
		"GET /v1/balance_transactions",
		fmt.Sprintf("gte:%d", from.Unix()),
		fmt.Sprintf("lt:%d", to.Unix()),
		"limit:100",
		"source:ch_123",
		"payout:po_123",
		"GET /v1/balance_transactions/txn_123",
		"GET /v1/events",
	}
	var out string
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		out = logs.String()
		missing := false
		for _, want := range wants {
			missing = missing || !strings.Contains(out, want)
		}
		if !missing || time.Now().After(deadline) {
			break
		}
	}
	for _, want := range wants {
		require.True(t, strings.Contains(out, want), "stripe-mock saw no %q in:\n%s", want, stripemock.Tail(out))
	}
}
