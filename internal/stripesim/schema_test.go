package stripesim

import (
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v79"

	"github.com/paygate/paygate/internal/stripeschema"
)

// The simulator renders API version 2024-06-20, and no stripe-mock release
// embeds exactly that spec, so it is checked against the two around it: one
// from before (2022-11-15, the version that stopped embedding a charge's
// refunds) and one from after. Whatever the simulator emits must fit both,
// except for the differences listed in schemaAllowances.
var schemaSpecs = []struct {
	mock string // stripe-mock release, in the module cache via scripts/tools.sh
	api  string // the API version its embedded spec describes
}{
	{mock: "v0.162.0", api: "2022-11-15"},
	{mock: "v0.203.0", api: "2026-08-26.dahlia"},
}

// schemaAllowance is one way one spec may disagree with what 2024-06-20
// renders: the field of the schema (as stripeschema.Violation names them),
// with the kind of violation it may raise there, and why that is right.
type schemaAllowance struct {
	mock   string
	schema string
	field  string
	kind   stripeschema.Kind
	reason string
	// sdk, for a field Stripe added after 2024-06-20, is the stripe-go v79
	// type (the SDK generated for 2024-06-20) for the object: the test
	// checks that it indeed has no such field.
	sdk any
}

// schemaAllowances lists every accepted difference, one schema, field and
// spec at a time. Each must be used by the scenario below: one no longer
// needed fails the test, so the list cannot rot.
//
// Nothing is allowed against v0.162.0 (2022-11-15): every field it requires
// was still there in 2024-06-20, and everything the simulator renders
// already existed in 2022-11-15.
var schemaAllowances = []schemaAllowance{
	{
		mock: "v0.203.0", schema: "balance_transaction", field: "balance_type", kind: stripeschema.KindRequired,
		reason: "which balance (payments, issuing…) the transaction moved: added after 2024-06-20, so absent from 2024-06-20's balance transactions",
		sdk:    stripe.BalanceTransaction{},
	},
	{
		mock: "v0.203.0", schema: "dispute", field: "enhanced_eligibility_types", kind: stripeschema.KindRequired,
		reason: "the card networks' enhanced evidence programs (Visa Compelling Evidence 3.0, compliance) a dispute qualifies for: added after 2024-06-20",
		sdk:    stripe.Dispute{},
	},
	{
		mock: "v0.203.0", schema: "dispute_evidence", field: "enhanced_evidence", kind: stripeschema.KindRequired,
		reason: "the evidence for those programs: added after 2024-06-20 with enhanced_eligibility_types",
		sdk:    stripe.DisputeEvidence{},
	},
	{
		mock: "v0.203.0", schema: "dispute_evidence_details", field: "enhanced_eligibility", kind: stripeschema.KindRequired,
		reason: "per-program eligibility status: added after 2024-06-20 with enhanced_eligibility_types",
		sdk:    stripe.DisputeEvidenceDetails{},
	},
}

func (a schemaAllowance) matches(mock string, v stripeschema.Violation) bool {
	return a.mock == mock && a.schema == v.Schema && a.field == v.Field && a.kind == v.Kind
}

var (
	specsOnce sync.Once
	specs     map[string]*stripeschema.Spec
	specsErr  error
)

// loadSpecs reads both specs once per test binary (8 MB of JSON each). A
// missing spec fails the test, naming scripts/tools.sh: skipping would let
// the simulator drift unchecked on any machine that forgot to run it.
func loadSpecs(t *testing.T) map[string]*stripeschema.Spec {
	t.Helper()
	specsOnce.Do(func() {
		specs = map[string]*stripeschema.Spec{}
		for _, sp := range schemaSpecs {
			path, err := stripeschema.StripeMockSpec(sp.mock)
			if err != nil {
				specsErr = err
				return
			}
			spec, err := stripeschema.Load(path)
			if err != nil {
				specsErr = fmt.Errorf("stripe-mock %s: %w", sp.mock, err)
				return
			}
			if spec.Version != sp.api {
				specsErr = fmt.Errorf("stripe-mock %s embeds API %s, want %s", sp.mock, spec.Version, sp.api)
				return
			}
			specs[sp.mock] = spec
		}
	})
	require.NoError(t, specsErr)
	return specs
}

// schemaScenario drives every typed scenario method, so that every kind of
// object, event and balance transaction the simulator can emit is emitted.
func schemaScenario() *Sim {
	sim := New(Config{
		Seed:               20240620,
		Now:                time.Date(2025, 3, 14, 9, 30, 0, 0, time.UTC),
		SettlementCurrency: "usd",
		ExchangeRates:      map[string]string{"eur": "1.085"},
	})
	ada := sim.CreateCustomer(CustomerOpts{Email: "ada@example.com", Name: "Ada Lovelace", Metadata: map[string]string{"shop_customer": "c-17"}})
	auto := sim.Pay(PayOpts{Amount: 2000, Currency: "usd", Email: "ada@example.com", Name: "Ada Lovelace",
		OrderID: "ord-1001", Customer: ada, Description: "Order ord-1001: a notebook", Metadata: map[string]string{"cart_id": "cart_9"}})
	sim.Advance(time.Hour)
	manual := sim.Pay(PayOpts{Amount: 5000, Currency: "eur", Email: "emmy@example.com", ManualCapture: true, OrderID: "ord-1002"})
	sim.Advance(26 * time.Hour)
	sim.UpdatePayment(manual, PaymentUpdate{Description: "Order ord-1002, shipped", Metadata: map[string]string{"shipment": "shp_1"}})
	sim.Capture(manual)
	canceled := sim.Pay(PayOpts{Amount: 700, ManualCapture: true})
	sim.Cancel(canceled)
	async := sim.Pay(PayOpts{Amount: 1500, Processing: true})
	sim.SetReceiptEmail(async, "late@example.com")
	retried := sim.Pay(PayOpts{Amount: 3000, Email: "grace@example.com", FailFirst: 2})
	sim.Pay(PayOpts{Amount: 900, Declined: true})
	sim.Advance(24 * time.Hour)

	partial := sim.Refund(auto, 500)
	sim.Refund(auto, 0)
	sim.Advance(72 * time.Hour)
	sim.FailRefund(partial.ID)

	won := sim.Dispute(manual, 0)
	lost := sim.Dispute(retried, 1000)
	inquiry := sim.Inquiry(sim.Pay(PayOpts{Amount: 4200}), 0)
	sim.Advance(10 * 24 * time.Hour)
	sim.CloseDispute(won, true)
	sim.CloseDispute(lost, false)
	sim.CloseDispute(inquiry, false)

	po := sim.Payout(1000, "")
	sim.Advance(48 * time.Hour)
	sim.FailPayout(po)
	sim.Payout(200, "usd")
	sim.Ignored()
	sim.BalanceTransactionOnly(BalanceTransactionOpts{Amount: -500})
	sim.BalanceTransactionOnly(BalanceTransactionOpts{Type: TxnAdjustment, Amount: 250, Fee: 25, Description: "Goodwill credit"})
	return sim
}

// TestSchemaAllowancesPostdatePinnedSDK checks the reason given for each
// field allowed as absent: stripe-go v79, generated for 2024-06-20, does not
// know it either.
func TestSchemaAllowancesPostdatePinnedSDK(t *testing.T) {
	t.Parallel()
	require.Equal(t, APIVersion, stripe.APIVersion, "the simulator's version is stripe-go's")
	for _, a := range schemaAllowances {
		require.NotEmptyf(t, a.reason, "allowance %s.%s has no reason", a.schema, a.field)
		if a.sdk == nil {
			continue
		}
		typ := reflect.TypeOf(a.sdk)
		for i := range typ.NumField() {
			name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
			require.NotEqualf(t, a.field, name, "stripe-go v79's %s has %s: it is in 2024-06-20, so the simulator must render it", typ, a.field)
		}
	}
}

// schemaChecker validates values against one spec and notes the allowances
// it used.
type schemaChecker struct {
	t    *testing.T
	mock string
	spec *stripeschema.Spec
	used map[int]bool
	bad  []string
}

func (c *schemaChecker) opts() *stripeschema.ValidateOpts {
	return &stripeschema.ValidateOpts{Allow: func(v stripeschema.Violation) bool {
		return slices.ContainsFunc(schemaAllowances, func(a schemaAllowance) bool { return a.matches(c.mock, v) })
	}}
}

// record keeps what is wrong and notes the allowances that matched.
func (c *schemaChecker) record(what string, vs []stripeschema.Violation) {
	for _, v := range vs {
		if !v.Allowed {
			c.bad = append(c.bad, what+": "+v.String())
			continue
		}
		for i, a := range schemaAllowances {
			if a.matches(c.mock, v) {
				c.used[i] = true
			}
		}
	}
}

// objectSchemas are the data.object kinds the simulator emits, by their
// "object" field, which is also the name of their schema.
var objectSchemas = []string{"charge", "customer", "dispute", "payment_intent", "payout", "refund"}

func (c *schemaChecker) event(what string, payload []byte) (object string) {
	v, err := stripeschema.Decode(payload)
	require.NoError(c.t, err, what)
	c.record(what, c.spec.Validate("event", v, c.opts()))
	env, _ := v.(map[string]any)
	data, _ := env["data"].(map[string]any)
	obj, _ := data["object"].(map[string]any)
	kind, _ := obj["object"].(string)
	require.Containsf(c.t, objectSchemas, kind, "%s: data.object.object", what)
	c.record(what+" data.object", c.spec.Validate(kind, obj, c.opts()))
	if prev, ok := data["previous_attributes"]; ok {
		pm, ok := prev.(map[string]any)
		require.Truef(c.t, ok, "%s: previous_attributes is %T", what, prev)
		require.NotEmptyf(c.t, pm, "%s: previous_attributes present but empty", what)
		for k, pv := range pm {
			// Previous values may be null: the field was unset before.
			c.record(what+" previous_attributes", c.spec.ValidateField(kind, k, pv, true, c.opts()))
		}
	}
	return kind
}

func TestSchemaObjectsMatchStripeOpenAPI(t *testing.T) {
	t.Parallel()
	start := time.Now()
	all := loadSpecs(t)
	sim := schemaScenario()
	srv := httptest.NewServer(sim.Handler())
	t.Cleanup(srv.Close)
	refunds := refundAnswers(t, sim, srv)

	used := map[int]bool{}
	for _, sp := range schemaSpecs {
		c := &schemaChecker{t: t, mock: sp.mock, spec: all[sp.mock], used: used}

		kinds := map[string]bool{}
		types := map[EventType]bool{}
		for _, ev := range sim.Events() {
			kinds[c.event(string(ev.Type)+" "+ev.ID, ev.Payload)] = true
			types[ev.Type] = true
		}

		// The HTTP API, through the real handler: the list envelopes, each
		// event and balance transaction in them, and one of each by id.
		evList := c.get(srv, "/v1/events?limit=100", "/v1/events", "200")
		evData := evList["data"].([]any)
		require.Len(t, evData, len(sim.Events()), "one page holds every event")
		for _, e := range evData {
			raw, err := json.Marshal(e)
			require.NoError(t, err)
			c.event("GET /v1/events item", raw)
		}
		first := sim.Events()[0].ID
		c.get(srv, "/v1/events/"+first, "/v1/events/{id}", "200")
		// A window's page and the next, as the sweep reads them.
		window := fmt.Sprintf("/v1/events?limit=5&created[gte]=%d&created[lt]=%d",
			sim.Events()[0].Created.Unix(), sim.Now().Unix()+1)
		page := c.get(srv, window, "/v1/events", "200")
		require.Equal(t, true, page["has_more"])
		pageData := page["data"].([]any)
		c.get(srv, window+"&starting_after="+pageData[len(pageData)-1].(map[string]any)["id"].(string), "/v1/events", "200")
		sim.FailNext(1, FailOpts{Status: http.StatusInternalServerError, Route: "GET /v1/events"})
		c.get(srv, window, "/v1/events", "default")

		btList := c.get(srv, "/v1/balance_transactions?limit=100", "/v1/balance_transactions", "200")
		btData := btList["data"].([]any)
		require.Len(t, btData, len(sim.BalanceTransactions()))
		txnTypes := map[string]bool{}
		for _, b := range btData {
			bm := b.(map[string]any)
			txnTypes[bm["type"].(string)+"/"+bm["reporting_category"].(string)] = true
			c.get(srv, "/v1/balance_transactions/"+bm["id"].(string), "/v1/balance_transactions/{id}", "200")
		}
		c.get(srv, "/v1/balance_transactions?limit=2&currency=usd", "/v1/balance_transactions", "200")
		// Errors have Stripe's error shape too.
		c.get(srv, "/v1/events/evt_missing", "/v1/events/{id}", "default")
		c.get(srv, "/v1/balance_transactions?limit=0", "/v1/balance_transactions", "default")
		sim.RateLimitNext(1, nil)
		c.get(srv, "/v1/balance_transactions?limit=2", "/v1/balance_transactions", "default")
		for _, a := range refunds {
			status := "default"
			if a.status == http.StatusOK {
				status = "200"
			}
			v, err := stripeschema.Decode(a.body)
			require.NoError(t, err, a.what)
			c.record("POST /v1/refunds "+a.what, c.spec.ValidateResponse(http.MethodPost, "/v1/refunds", status, v, c.opts()))
		}

		if len(c.bad) > 0 {
			t.Errorf("stripe-mock %s (API %s): %d violations:\n%s", sp.mock, sp.api, len(c.bad), strings.Join(c.bad, "\n"))
		}

		// A schema check of nothing proves nothing: every kind must have
		// been seen.
		require.ElementsMatch(t, objectSchemas, schemaKeys(kinds), "data.object kinds")
		for _, typ := range declaredEventTypes(t) {
			require.Truef(t, types[typ], "scenario emits no %s", typ)
		}
		for _, want := range []string{
			"charge/charge", "refund/refund", "refund_failure/refund_failure",
			"adjustment/dispute", "adjustment/dispute_reversal", "payout/payout",
			"payout_failure/payout_reversal", "stripe_fee/fee", "adjustment/other_adjustment",
		} {
			require.Truef(t, txnTypes[want], "no %s balance transaction listed", want)
		}
	}
	for i, a := range schemaAllowances {
		if !used[i] {
			t.Errorf("allowance for %s %s.%s (%s) matched nothing: the simulator or the spec changed; drop it", a.mock, a.schema, a.field, a.kind)
		}
	}
	require.Less(t, time.Since(start), 10*time.Second, "the schema check must stay fast")
}

// refundAnswer is one answer of POST /v1/refunds, kept to be validated
// against each spec.
type refundAnswer struct {
	what   string
	status int
	body   []byte
}

// refundAnswers makes every kind of answer POST /v1/refunds gives: refunds
// by payment intent and by charge, with and without reason and metadata,
// replays, and each error. Its refunds' events join the scenario's.
func refundAnswers(t *testing.T, sim *Sim, srv *httptest.Server) []refundAnswer {
	t.Helper()
	p := sim.Pay(PayOpts{Amount: 2500, Currency: "eur", Email: "refunds@example.com"})
	var out []refundAnswer
	post := func(what, key string, form url.Values, want int) {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/v1/refunds", strings.NewReader(form.Encode()))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+DefaultAPIKey)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		resp, err := srv.Client().Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.Equal(t, want, resp.StatusCode, "%s: %s", what, body)
		out = append(out, refundAnswer{what: what, status: resp.StatusCode, body: body})
	}
	withMeta := url.Values{"payment_intent": {p.ID}, "amount": {"1000"}, "reason": {"duplicate"}, "metadata[paygate_refund_request]": {"rr_schema"}}
	post("by payment_intent", "schema-1", withMeta, http.StatusOK)
	post("replayed", "schema-1", withMeta, http.StatusOK)
	post("other parameters", "schema-1", url.Values{"payment_intent": {p.ID}, "amount": {"999"}}, http.StatusBadRequest)
	post("amount_too_large", "schema-2", url.Values{"payment_intent": {p.ID}, "amount": {"99999"}}, http.StatusBadRequest)
	post("resource_missing", "schema-3", url.Values{"charge": {"ch_missing"}}, http.StatusNotFound)
	post("invalid reason", "", url.Values{"payment_intent": {p.ID}, "reason": {"bored"}}, http.StatusBadRequest)
	sim.RefuseNextRefund("card_error", "expired_card", "Your card has expired.")
	post("card_error", "schema-4", url.Values{"payment_intent": {p.ID}}, http.StatusPaymentRequired)
	sim.FailNextRefundRequest(http.StatusInternalServerError)
	post("api_error", "schema-5", url.Values{"payment_intent": {p.ID}}, http.StatusInternalServerError)
	sim.FailNextRefundRequest(http.StatusServiceUnavailable)
	post("unavailable", "schema-6", url.Values{"payment_intent": {p.ID}}, http.StatusServiceUnavailable)
	post("by charge, the rest", "", url.Values{"charge": {p.ChargeID}}, http.StatusOK)
	post("charge_already_refunded", "schema-7", url.Values{"charge": {p.ChargeID}}, http.StatusBadRequest)
	return out
}

// get calls the simulator's API and validates the answer against the
// response the spec documents for route.
func (c *schemaChecker) get(srv *httptest.Server, url, route, status string) map[string]any {
	c.t.Helper()
	req, err := http.NewRequest(http.MethodGet, srv.URL+url, nil)
	require.NoError(c.t, err)
	req.Header.Set("Authorization", "Bearer "+DefaultAPIKey)
	resp, err := srv.Client().Do(req)
	require.NoError(c.t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(c.t, err)
	if status == "200" {
		require.Equal(c.t, http.StatusOK, resp.StatusCode, "GET %s: %s", url, body)
	} else {
		require.GreaterOrEqual(c.t, resp.StatusCode, 400, "GET %s: %s", url, body)
	}
	v, err := stripeschema.Decode(body)
	require.NoError(c.t, err, "GET %s", url)
	c.record("GET "+url, c.spec.ValidateResponse(http.MethodGet, route, status, v, c.opts()))
	m, _ := v.(map[string]any)
	return m
}

// declaredEventTypes is every EventType constant events.go declares, read
// from the source so that an event type added later without a place in
// schemaScenario fails the test instead of going unchecked.
func declaredEventTypes(t *testing.T) []EventType {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "events.go", nil, parser.SkipObjectResolution)
	require.NoError(t, err)
	var out []EventType
	for _, d := range f.Decls {
		gd, ok := d.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST {
			continue
		}
		for _, spec := range gd.Specs {
			vs := spec.(*ast.ValueSpec)
			if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != "EventType" {
				continue
			}
			for _, v := range vs.Values {
				lit, ok := v.(*ast.BasicLit)
				require.Truef(t, ok && lit.Kind == token.STRING, "EventType constant %s is not a string literal", vs.Names[0])
				s, err := strconv.Unquote(lit.Value)
				require.NoError(t, err)
				out = append(out, EventType(s))
			}
		}
	}
	require.NotEmpty(t, out, "no EventType constants found in events.go")
	return out
}

func schemaKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
