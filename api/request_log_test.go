package api_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/api"
	"github.com/paygate/paygate/internal/adyensim"
	"github.com/paygate/paygate/internal/outbuf"
	"github.com/paygate/paygate/internal/stripesim"
	"github.com/paygate/paygate/provider"
	"github.com/paygate/paygate/provider/adyen"
	"github.com/paygate/paygate/provider/stripe"
	"github.com/paygate/paygate/webhook"
)

// TestWebhookRequestIsOneLogLine: a webhook of one event leaves one log
// line, the request's, naming the event and whether it was a duplicate; a
// batch's request line counts its events, each of which has a line of its
// own. Nothing of the payload or the signature is in either.
func TestWebhookRequestIsOneLogLine(t *testing.T) {
	t.Parallel()
	const secret = "whsec_request_log_test"
	adyenKey := []byte("request-log-test-key")
	logs := &outbuf.Buffer{}
	logger := slog.New(slog.NewJSONHandler(logs, nil))
	b := setupOps(t, func(c *api.Config) { c.Logger = logger })
	ar, err := adyen.NewReceiver(adyen.Config{HMACKeys: [][]byte{adyenKey}})
	require.NoError(t, err)
	webhook.NewHandler(webhook.Config{
		Ingester:  &webhook.TxIngester{Pool: b.pool, Enqueue: b.jobs},
		Receivers: []provider.Receiver{stripe.NewReceiver([]string{secret}, 0), ar},
		Logger:    logger,
	}).Register(b.echo)
	srv := httptest.NewServer(b.echo)
	t.Cleanup(srv.Close)
	ctx := context.Background()

	sim := stripesim.New(stripesim.Config{WebhookSecret: secret})
	sim.Pay(stripesim.PayOpts{Amount: 1250, Currency: "eur", Email: "request-log@example.test"})
	events := sim.Events()
	results, err := sim.Deliver(ctx, srv.URL+"/webhooks/stripe", events[:1], &stripesim.DeliverOpts{Copies: 2})
	require.NoError(t, err)
	require.Len(t, results, 2)

	lines := logLines(t, logs.String())
	require.Len(t, lines, 2, "one line a request:\n%s", logs.String())
	for i, l := range lines {
		require.Equal(t, "request", l["msg"])
		require.Equal(t, "/webhooks/stripe", l["route"])
		require.EqualValues(t, http.StatusOK, l["status"])
		require.Equal(t, "stripe", l["provider"])
		require.Equal(t, events[0].ID, l["event_id"])
		require.Equal(t, string(events[0].Type), l["type"])
		require.Equal(t, i == 1, l["duplicate"], "the second copy is the duplicate")
		require.NotEmpty(t, l["request_id"])
	}

	seen := len(logs.String())
	asim := adyensim.New(adyensim.Config{HMACKey: adyenKey})
	psp, auth := asim.Authorise(4200, "EUR", "order-request-log", true)
	_, capture := asim.Capture(psp, 4200)
	res, err := asim.Deliver(ctx, srv.URL+"/webhooks/adyen", "", auth, capture)
	require.NoError(t, err)
	require.NoError(t, res.Body.Close())
	require.Equal(t, http.StatusOK, res.StatusCode)

	lines = logLines(t, logs.String()[seen:])
	require.Len(t, lines, 3, "the request's line and one for each of the batch's two events:\n%s", logs.String()[seen:])
	var request map[string]any
	received := 0
	for _, l := range lines {
		switch l["msg"] {
		case "request":
			request = l
		case "webhook received":
			received++
			require.Equal(t, "adyen", l["provider"])
			require.Equal(t, false, l["duplicate"])
			require.NotEmpty(t, l["event_id"])
		}
	}
	require.Equal(t, 2, received)
	require.NotNil(t, request)
	require.Equal(t, "adyen", request["provider"])
	require.EqualValues(t, 2, request["events"])
	require.EqualValues(t, 2, request["new"])
	require.NotContains(t, request, "event_id", "a batch's line names no single event")

	// The amounts are looked for in what a line says, not in its clock:
	// a timestamp's nanoseconds may spell "1250" by chance.
	var said strings.Builder
	for _, l := range logLines(t, logs.String()) {
		delete(l, "time")
		delete(l, "duration_ms")
		line, err := json.Marshal(l)
		require.NoError(t, err)
		said.Write(line)
	}
	for _, leak := range []string{secret, "request-log@example.test", "hmacSignature"} {
		require.NotContains(t, logs.String(), leak)
	}
	for _, amount := range []string{"4200", "1250", "42.00", "12.50"} {
		require.NotContains(t, said.String(), amount)
	}
}

func logLines(t *testing.T, logs string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(logs), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &m), line)
		out = append(out, m)
	}
	return out
}
