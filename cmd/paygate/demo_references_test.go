package main

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// dayPayment is a payment of the demo's day as the shop made it: the
// order, the shopper and the words its provider carries.
type dayPayment struct {
	provider    string
	reference   string
	customer    *string
	description *string
	metadata    map[string]string
}

// capturedMessages is a local endpoint of the merchant's: it keeps every
// message paygate delivers, once per id.
type capturedMessages struct {
	mu   sync.Mutex
	byID map[string]capturedMessage
}

type capturedMessage struct {
	Type     string `json:"type"`
	Sequence int64  `json:"sequence"`
	Data     struct {
		Payment *struct {
			ID          string            `json:"id"`
			Reference   *string           `json:"reference"`
			Customer    *string           `json:"customer"`
			Description *string           `json:"description"`
			Metadata    map[string]string `json:"metadata"`
		} `json:"payment"`
	} `json:"data"`
}

func (c *capturedMessages) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	var msg struct {
		ID string `json:"id"`
		capturedMessage
	}
	if err != nil || json.Unmarshal(body, &msg) != nil || msg.ID == "" {
		http.Error(w, "not a message", http.StatusBadRequest)
		return
	}
	c.mu.Lock()
	c.byID[msg.ID] = msg.capturedMessage
	c.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (c *capturedMessages) all() []capturedMessage {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]capturedMessage, 0, len(c.byID))
	for _, m := range c.byID {
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b capturedMessage) int { return int(a.Sequence - b.Sequence) })
	return out
}

// TestDemoSpeaksTheShopsReferences: a day of the demo's shop, whose every
// payment names its order, reaches everything paygate sends out in the
// shop's words. The payment messages at a local endpoint carry each
// payment's reference, customer, description and metadata as its provider
// sent them; each receipt and refund confirmation names the order; ops get
// one double_charge email for the order charged twice, naming it and both
// payments; the day's reconciliation items and their CSV, and the journal
// exported by transaction, name each payment's order.
func TestDemoSpeaksTheShopsReferences(t *testing.T) {
	t.Parallel()
	m := startMakeRun(t)
	base := "http://" + m.srv.addr

	captured := &capturedMessages{byID: map[string]capturedMessage{}}
	endpoint := httptest.NewServer(captured)
	t.Cleanup(endpoint.Close)
	var ep struct {
		ID string `json:"id"`
	}
	require.NoError(t, json.Unmarshal(m.post(t, devOpsToken, "/v1/endpoints",
		fmt.Sprintf(`{"url":%q,"event_types":["*"]}`, endpoint.URL), http.StatusCreated, "Idempotency-Key", "test-endpoint-"+nonce()), &ep))

	out := m.demo(t)
	yesterday := time.Now().UTC().Truncate(24*time.Hour).AddDate(0, 0, -1).Format(time.DateOnly)
	today := time.Now().UTC().Format(time.DateOnly)

	// The day as the shop made it: each payment's order from the demo's
	// report, and Stripe's words from Stripe's own list of events.
	day := map[string]*dayPayment{}
	for _, l := range regexp.MustCompile(`(?m)^ {12}(pi_\w+|[0-9A-Z]{16}) +\S+ [a-z]{3}  (ord-\d+) `).FindAllStringSubmatch(out, -1) {
		p := &dayPayment{provider: "adyen", reference: l[2]}
		if strings.HasPrefix(l[1], "pi_") {
			p.provider = "stripe"
		}
		day[l[1]] = p
	}
	require.Len(t, day, 19, "the day's payments, each with its order:\n%s", out)
	for id, words := range stripeIntents(t, m) {
		p, ok := day[id]
		require.True(t, ok, "Stripe lists %s, which the demo did not report", id)
		require.Equal(t, p.reference, words.Metadata["order_id"], id)
		p.customer, p.description, p.metadata = words.Customer, words.Description, words.Metadata
	}
	for id, p := range day {
		if p.provider == "stripe" {
			require.NotNil(t, p.customer, "%s has a Customer", id)
			require.Regexp(t, `^cus_`, *p.customer)
			require.NotNil(t, p.description, id)
			require.Equal(t, map[string]string{"order_id": p.reference, "cart_id": "cart-" + strings.TrimPrefix(p.reference, "ord-")}, p.metadata)
		}
	}
	twice := requireDoubleCharge(t, m, out)

	// Messages.
	var pending struct {
		Deliveries []json.RawMessage `json:"deliveries"`
	}
	require.Eventually(t, func() bool {
		if !slices.ContainsFunc(captured.all(), func(c capturedMessage) bool { return c.Type == "reconciliation_run.completed" }) {
			return false
		}
		m.get(t, devOpsToken, "/v1/endpoints/"+ep.ID+"/deliveries?status=pending&limit=1", &pending)
		return len(pending.Deliveries) == 0
	}, time.Minute, 100*time.Millisecond, "every message delivered to the local endpoint")
	last := map[string]capturedMessage{}
	for _, msg := range captured.all() {
		if !strings.HasPrefix(msg.Type, "payment.") {
			continue
		}
		pm := msg.Data.Payment
		require.NotNil(t, pm, msg.Type)
		p, ok := day[pm.ID]
		require.True(t, ok, "a message of %s, no payment of the day", pm.ID)
		last[pm.ID] = msg
		if pm.Reference == nil {
			// A change applied before any event that names the order (a
			// CAPTURE before its AUTHORISATION, a refund before its charge):
			// nothing is known yet, and nothing wrong is said.
			require.Nil(t, pm.Customer, "%s %s", msg.Type, pm.ID)
			require.Nil(t, pm.Description, "%s %s", msg.Type, pm.ID)
			require.Empty(t, pm.Metadata, "%s %s", msg.Type, pm.ID)
			continue
		}
		requireWords(t, p, pm.Reference, pm.Customer, pm.Description, pm.Metadata, msg.Type+" "+pm.ID)
	}
	require.Len(t, last, 19, "every payment of the day has its messages")
	refunded := regexp.MustCompile(`refund +rr_\w+ 20\.00 gbp of ([0-9A-Z]{16}) \(adyen\)`).FindStringSubmatch(out)
	require.NotNil(t, refunded, out)
	for id, p := range day {
		// Every Stripe event that tells a payment's capture names its
		// order, so a Stripe payment's last message does; an Adyen
		// payment's does once a change follows its AUTHORISATION, as the
		// refund through paygate does.
		if p.provider == "stripe" || id == refunded[1] {
			requireWords(t, p, last[id].Data.Payment.Reference, last[id].Data.Payment.Customer,
				last[id].Data.Payment.Description, last[id].Data.Payment.Metadata, "the last message of "+id)
		}
	}
	for id, p := range day {
		var view struct {
			Reference   *string           `json:"reference"`
			Customer    *string           `json:"customer"`
			Description *string           `json:"description"`
			Metadata    map[string]string `json:"metadata"`
		}
		m.get(t, devOpsToken, "/v1/payments/"+id, &view)
		requireWords(t, p, view.Reference, view.Customer, view.Description, view.Metadata, "GET /v1/payments/"+id)
	}

	// Emails: every receipt and refund confirmation names its payment's
	// order; ops are told of the double charge once.
	kinds := map[string][]string{} // kind → mailpit ids
	require.Eventually(t, func() bool {
		clear(kinds)
		for _, msg := range m.mail.Messages(t) {
			kind, _, _ := strings.Cut(msg.MessageID, ".")
			kinds[kind] = append(kinds[kind], msg.ID)
		}
		return len(kinds["payment_receipt"]) == 12 && len(kinds["refund_confirmation"]) == 3 && len(kinds["double_charge"]) == 1
	}, time.Minute, 100*time.Millisecond, "emails: %v", kinds)
	named := regexp.MustCompile(`(?m)^Order: +(ord-\d+)\r?$`)
	paidBy := regexp.MustCompile(`(?m)^Payment: +(\S+?)\r?$`)
	for _, kind := range []string{"payment_receipt", "refund_confirmation"} {
		for _, id := range kinds[kind] {
			email := m.mail.Get(t, id)
			order, payment := named.FindStringSubmatch(email.Text), paidBy.FindStringSubmatch(email.Text)
			require.NotNil(t, order, "%s names the order:\n%s", kind, email.Text)
			require.NotNil(t, payment, email.Text)
			require.Contains(t, day, payment[1])
			require.Equal(t, day[payment[1]].reference, order[1], "%s of %s", kind, payment[1])
			require.Contains(t, email.Subject, "for order "+order[1])
		}
	}
	alert := m.mail.Get(t, kinds["double_charge"][0])
	require.Equal(t, "ops@localhost", alert.To[0].Address)
	require.Contains(t, alert.Subject, "Order "+twice+" charged 2 times")
	for id, p := range day {
		if p.reference == twice {
			require.Contains(t, alert.Text, id, "the email names each payment of the order")
		}
	}

	// Reconciliation: the demo's run of the day, its items and their CSV.
	runID := regexp.MustCompile(`reconciled run #(\d+)`).FindStringSubmatch(out)
	require.NotNil(t, runID, out)
	var run struct {
		Items []struct {
			ID        int64   `json:"id"`
			Type      string  `json:"type"`
			PaymentID *string `json:"payment_id"`
			Reference *string `json:"reference"`
		} `json:"items"`
	}
	m.get(t, devFinanceToken, "/v1/reconciliation/runs/"+runID[1]+"?limit=500", &run)
	charges := 0
	for _, it := range run.Items {
		if it.PaymentID == nil {
			require.Nil(t, it.Reference, "item %d has no payment, so no order", it.ID)
			continue
		}
		p, ok := day[*it.PaymentID]
		require.True(t, ok, "item %d of payment %s", it.ID, *it.PaymentID)
		require.NotNil(t, it.Reference, "item %d (%s) of %s names its order", it.ID, it.Type, *it.PaymentID)
		require.Equal(t, p.reference, *it.Reference, "item %d", it.ID)
		if it.Type == "charge" {
			charges++
		}
	}
	require.Equal(t, 12, charges, "every charge of the day, matched, names its order")
	rows := getCSV(t, base+"/v1/reconciliation/runs/"+runID[1]+"/items.csv", devFinanceToken)
	col := columns(t, rows[0], "payment_id", "reference", "type")
	require.Len(t, rows, len(run.Items)+1)
	for _, r := range rows[1:] {
		if id := r[col["payment_id"]]; id != "" {
			require.Equal(t, day[id].reference, r[col["reference"]], "CSV row of %s (%s)", id, r[col["type"]])
		} else {
			require.Empty(t, r[col["reference"]])
		}
	}

	// The journal by transaction: each of the day's movements names its
	// payment's order, and QuickBooks' description says it too.
	q := url.Values{"from": {yesterday}, "to": {today}, "granularity": {"transaction"}}
	rows = getCSV(t, base+"/v1/ledger/journal.csv?"+q.Encode(), devFinanceToken)
	col = columns(t, rows[0], "description", "reference")
	ofPayment := regexp.MustCompile(` payment (\S+)`)
	journaled := map[string]bool{}
	for _, r := range rows[1:] {
		pay := ofPayment.FindStringSubmatch(r[col["description"]])
		if pay == nil || day[pay[1]] == nil {
			continue
		}
		journaled[pay[1]] = true
		require.Equal(t, day[pay[1]].reference, r[col["reference"]], "journal row %v", r)
	}
	require.Len(t, journaled, 16, "the twelve Stripe payments captured and four at Adyen")
	q.Set("format", "quickbooks")
	rows = getCSV(t, base+"/v1/ledger/journal.csv?"+q.Encode(), devFinanceToken)
	col = columns(t, rows[0], "Description")
	n := 0
	for _, r := range rows[1:] {
		if strings.Contains(r[col["Description"]], "order "+twice) {
			n++
		}
	}
	require.Positive(t, n, "QuickBooks' lines of the order charged twice name it")

	doubles := 0
	for _, msg := range m.mail.Messages(t) {
		if strings.HasPrefix(msg.MessageID, "double_charge.") {
			doubles++
		}
	}
	require.Equal(t, 1, doubles, "one detection, one email: the refund that resolved it sends none")
}

// requireWords checks what paygate tells of a payment against what the
// shop gave its provider: Stripe's order, Customer, description and
// metadata; Adyen's order, shopper and cart, with no description.
func requireWords(t *testing.T, p *dayPayment, reference, customer, description *string, metadata map[string]string, what string) {
	t.Helper()
	require.NotNil(t, reference, what)
	require.Equal(t, p.reference, *reference, what)
	if p.provider == "stripe" {
		require.Equal(t, p.customer, customer, what)
		require.Equal(t, p.description, description, what)
		require.Equal(t, p.metadata, metadata, what)
		return
	}
	require.NotNil(t, customer, what)
	require.Regexp(t, `^cust-[a-z]+$`, *customer, what)
	require.Nil(t, description, "%s: Adyen has no description", what)
	require.Equal(t, map[string]string{"cart_id": "cart-" + strings.TrimPrefix(p.reference, "ord-")}, metadata, what)
}

// stripeWords are the merchant's fields of a PaymentIntent.
type stripeWords struct {
	Customer    *string           `json:"customer"`
	Description *string           `json:"description"`
	Metadata    map[string]string `json:"metadata"`
}

// stripeIntents reads the demo shop's Stripe events, as Stripe's API lists
// them, and returns each PaymentIntent's words as its newest event shows
// them.
func stripeIntents(t *testing.T, m *makeRun) map[string]stripeWords {
	t.Helper()
	out := map[string]stripeWords{}
	for after := ""; ; {
		var page struct {
			Data []struct {
				ID   string `json:"id"`
				Data struct {
					Object struct {
						ID     string `json:"id"`
						Object string `json:"object"`
						stripeWords
					} `json:"object"`
				} `json:"data"`
			} `json:"data"`
			HasMore bool `json:"has_more"`
		}
		q := url.Values{"limit": {"100"}}
		if after != "" {
			q.Set("starting_after", after)
		}
		require.Equal(t, http.StatusOK, getJSON(t, m.world+"/v1/events?"+q.Encode(), devStripeAPIKey, &page))
		for _, ev := range page.Data {
			// Newest first: the first seen is the newest.
			if obj := ev.Data.Object; obj.Object == "payment_intent" {
				if _, seen := out[obj.ID]; !seen {
					out[obj.ID] = obj.stripeWords
				}
			}
			after = ev.ID
		}
		if !page.HasMore {
			return out
		}
	}
}

// getCSV reads a CSV answer.
func getCSV(t *testing.T, target, token string) [][]string {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, target, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode, "GET %s: %s", target, body)
	rows, err := csv.NewReader(strings.NewReader(string(body))).ReadAll()
	require.NoError(t, err)
	require.NotEmpty(t, rows)
	return rows
}

// columns finds each of names in a CSV header.
func columns(t *testing.T, header []string, names ...string) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, n := range names {
		i := slices.Index(header, n)
		require.GreaterOrEqual(t, i, 0, "column %s in %v", n, header)
		out[n] = i
	}
	return out
}
