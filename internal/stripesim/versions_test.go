package stripesim

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v79"

	"github.com/paygate/paygate/internal/stripeschema"
)

// legacyAllowances are the differences between what LegacyAPIVersion
// renders and the 2022-11-15 spec (stripe-mock v0.162.0): exactly what
// 2022-11-15 changed, and each must be met. (latest_charge, which
// 2022-11-15 added in its place, is not required by that spec.)
var legacyAllowances = []schemaAllowance{
	{
		mock: "v0.162.0", schema: "payment_intent", field: "charges", kind: stripeschema.KindUnknown,
		reason: "2022-11-15 removed a PaymentIntent's charges list",
	},
}

// TestLegacyEventsMatchStripeOpenAPI: an account on LegacyAPIVersion lists
// its events in that version's shape, which differs from the 2022-11-15
// spec in what 2022-11-15 changed and nothing else, while its webhooks stay
// in APIVersion's shape; the SDK pinned to APIVersion knows no charges list.
func TestLegacyEventsMatchStripeOpenAPI(t *testing.T) {
	t.Parallel()
	spec := loadSpecs(t)["v0.162.0"]
	sim := New(Config{Seed: 2208, Now: time.Date(2025, 3, 14, 9, 0, 0, 0, time.UTC), AccountAPIVersion: LegacyAPIVersion})
	auto := sim.Pay(PayOpts{Amount: 2000, Email: "ada@example.com", OrderID: "ord-1", FailFirst: 1})
	manual := sim.Pay(PayOpts{Amount: 5000, ManualCapture: true})
	sim.Advance(time.Hour)
	sim.Capture(manual)
	sim.Refund(auto, 500)
	srv := httptest.NewServer(sim.Handler())
	t.Cleanup(srv.Close)

	used := map[int]bool{}
	allow := &stripeschema.ValidateOpts{Allow: func(v stripeschema.Violation) bool {
		return slices.ContainsFunc(legacyAllowances, func(a schemaAllowance) bool { return a.matches("v0.162.0", v) })
	}}
	var bad []string
	record := func(what string, vs []stripeschema.Violation) {
		for _, v := range vs {
			if !v.Allowed {
				bad = append(bad, what+": "+v.String())
			}
			for i, a := range legacyAllowances {
				if a.matches("v0.162.0", v) {
					used[i] = true
				}
			}
		}
	}

	listed := getJSON(t, srv, "/v1/events?limit=100")
	record("GET /v1/events", spec.ValidateResponse(http.MethodGet, "/v1/events", "200", listed, allow))
	items := listed.(map[string]any)["data"].([]any)
	require.Len(t, items, len(sim.Events()))
	var intents, charges, refundLists int
	for _, item := range items {
		ev := item.(map[string]any)
		require.Equal(t, LegacyAPIVersion, ev["api_version"])
		obj := ev["data"].(map[string]any)["object"].(map[string]any)
		kind := obj["object"].(string)
		record(fmt.Sprint(ev["type"], " ", ev["id"]), spec.Validate(kind, obj, allow))
		switch kind {
		case "payment_intent":
			intents++
			require.NotContains(t, obj, "latest_charge")
			list := obj["charges"].(map[string]any)
			require.Equal(t, "list", list["object"])
			if data := list["data"].([]any); len(data) > 0 {
				// The latest charge heads the list, as latest_charge
				// names it in the webhook's copy.
				webhook, ok := sim.Event(ev["id"].(string))
				require.True(t, ok)
				var w struct {
					Data struct {
						Object struct {
							LatestCharge string `json:"latest_charge"`
						} `json:"object"`
					} `json:"data"`
				}
				require.NoError(t, json.Unmarshal(webhook.Payload, &w))
				require.Equal(t, w.Data.Object.LatestCharge, data[0].(map[string]any)["id"])
				require.Contains(t, string(webhook.Payload), `"api_version": "`+APIVersion+`"`)
			}
		case "charge":
			charges++
			if len(obj["refunds"].(map[string]any)["data"].([]any)) > 0 {
				refundLists++
			}
		}
	}
	require.Positive(t, intents)
	require.Positive(t, charges)
	require.Positive(t, refundLists, "a charge.refunded lists its refunds")
	if len(bad) > 0 {
		t.Errorf("%d violations:\n%s", len(bad), strings.Join(bad, "\n"))
	}
	for i, a := range legacyAllowances {
		require.Truef(t, used[i], "allowance %s.%s matched nothing", a.schema, a.field)
	}
	require.NotContains(t, jsonFields(stripe.PaymentIntent{}), "charges", "stripe-go v79 (2024-06-20) has no PaymentIntent.charges")
	require.Contains(t, jsonFields(stripe.PaymentIntent{}), "latest_charge")

	// Retrieving one renders it as the list does.
	one := getJSON(t, srv, "/v1/events/"+sim.EventsOf(auto.ID)[0].ID).(map[string]any)
	require.Equal(t, LegacyAPIVersion, one["api_version"])
}

// jsonFields are the JSON names of a struct's fields.
func jsonFields(v any) []string {
	var out []string
	typ := reflect.TypeOf(v)
	for i := range typ.NumField() {
		name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
		out = append(out, name)
	}
	return out
}

func getJSON(t *testing.T, srv *httptest.Server, path string) any {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, srv.URL+path, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+DefaultAPIKey)
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "GET %s: %s", path, body)
	v, err := stripeschema.Decode(body)
	require.NoError(t, err)
	return v
}

// TestEventsListKeepsThirtyDays: GET /v1/events lists the events of the 30
// days before the simulator's clock only, newest first, through the
// created filters and the cursor, and FailNext fails a list in its middle.
func TestEventsListKeepsThirtyDays(t *testing.T) {
	t.Parallel()
	start := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	sim := New(Config{Seed: 30, Now: start})
	old := sim.Pay(PayOpts{Amount: 100})
	sim.Advance(31 * 24 * time.Hour)
	var recent []*Payment
	for range 3 {
		recent = append(recent, sim.Pay(PayOpts{Amount: 200}))
		sim.Advance(time.Hour)
	}
	srv := httptest.NewServer(sim.Handler())
	t.Cleanup(srv.Close)
	ids := func(v any) []string {
		var out []string
		for _, it := range v.(map[string]any)["data"].([]any) {
			out = append(out, it.(map[string]any)["id"].(string))
		}
		return out
	}
	all := ids(getJSON(t, srv, "/v1/events?limit=100"))
	require.Len(t, all, 3*2, "three payments' events; the one of 31 days ago is gone")
	for _, ev := range sim.EventsOf(old.ID) {
		require.NotContains(t, all, ev.ID)
	}
	require.Equal(t, sim.EventsOf(recent[2].ID)[1].ID, all[0], "newest first")

	// A window and a cursor.
	from, to := start.Add(31*24*time.Hour).Unix(), start.Add(31*24*time.Hour+2*time.Hour).Unix()
	q := fmt.Sprintf("/v1/events?limit=3&created[gte]=%d&created[lt]=%d", from, to)
	first := getJSON(t, srv, q)
	require.Equal(t, true, first.(map[string]any)["has_more"])
	page := ids(first)
	require.Len(t, page, 3)
	rest := ids(getJSON(t, srv, q+"&starting_after="+page[2]))
	require.Len(t, rest, 1)
	require.Equal(t, all[2:6], append(page, rest...))

	// The second request of the list fails, twice; the third gets through.
	sim.FailNext(2, FailOpts{Status: http.StatusServiceUnavailable, Route: "GET /v1/events", After: 1})
	getJSON(t, srv, q)
	for _, want := range []int{http.StatusServiceUnavailable, http.StatusServiceUnavailable, http.StatusOK} {
		req, err := http.NewRequest(http.MethodGet, srv.URL+q+"&starting_after="+page[2], nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+DefaultAPIKey)
		resp, err := srv.Client().Do(req)
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, want, resp.StatusCode, "%s", body)
		if want != http.StatusOK {
			require.Contains(t, string(body), `"type": "api_error"`)
		}
	}
}
