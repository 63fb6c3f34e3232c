package api_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/api"
	"github.com/paygate/paygate/internal/stripesim"
)

type doubleChargePayment struct {
	ID             string `json:"id"`
	Provider       string `json:"provider"`
	Status         string `json:"status"`
	Currency       string `json:"currency"`
	AmountCaptured string `json:"amount_captured"`
	AmountRefunded string `json:"amount_refunded"`
}

type doubleCharge struct {
	Reference   string                `json:"reference"`
	State       string                `json:"state"`
	DetectedAt  time.Time             `json:"detected_at"`
	ResolvedAt  *time.Time            `json:"resolved_at"`
	DismissedBy *string               `json:"dismissed_by"`
	Note        *string               `json:"note"`
	Payments    []doubleChargePayment `json:"payments"`
}

type doubleChargePage struct {
	DoubleCharges []doubleCharge `json:"double_charges"`
	NextCursor    *string        `json:"next_cursor"`
}

// doubleCharges lists every double charge GET path answers token,
// following every page.
func (r *refWorld) doubleCharges(t *testing.T, path, token string) []doubleCharge {
	t.Helper()
	var out []doubleCharge
	for {
		var page doubleChargePage
		rec := get(t, r.e, path, token, &page)
		require.Equal(t, http.StatusOK, rec.Code, "%s: %s", path, rec.Body.String())
		out = append(out, page.DoubleCharges...)
		if page.NextCursor == nil {
			return out
		}
		path = withQuery(path, "cursor", *page.NextCursor)
	}
}

func references(list []doubleCharge) []string {
	out := []string{}
	for _, d := range list {
		out = append(out, d.Reference)
	}
	return out
}

// post sends a POST under key ("" for none) with body.
func (r *refWorld) post(t *testing.T, path, token, key, body string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
	req.Header.Set(echo.HeaderContentType, echo.MIMEApplicationJSON)
	req.Header.Set(echo.HeaderAuthorization, "Bearer "+token)
	if key != "" {
		req.Header.Set(api.HeaderIdempotencyKey, key)
	}
	rec := httptest.NewRecorder()
	r.e.ServeHTTP(rec, req)
	return rec
}

func dismissPath(reference string) string {
	return "/v1/ops/double-charges/" + url.PathEscape(reference) + "/dismiss"
}

// TestDoubleChargesThroughTheAPI: references paid twice are listed by
// state with their payments, to ops and finance; ops dismiss an open one
// with a note, audited in the same transaction, once per Idempotency-Key;
// what is not open, not there, or not noted is refused, and finance may
// not dismiss.
func TestDoubleChargesThroughTheAPI(t *testing.T) {
	t.Parallel()
	r := setupRefWorld(t)
	ctx := context.Background()
	pay := func(ref, currency string, amount int64) *stripesim.Payment {
		return r.sim.Pay(stripesim.PayOpts{Amount: amount, Currency: currency, Metadata: map[string]string{"order_id": ref}})
	}
	// Paid twice, in two currencies: open.
	x1, x2 := pay("ord_X", "usd", 36000), pay("ord_X", "jpy", 5000)
	// Applied apart from ord_Y's, so that each is detected at an instant
	// of its own: one batch may detect both, or two in either order.
	r.apply(t)
	// Paid twice, then one refunded in full: resolved.
	y1, y2 := pay("ord_Y", "usd", 1000), pay("ord_Y", "usd", 1000)
	// Paid once: none.
	pay("ord_once", "usd", 1000)
	r.apply(t)
	r.sim.Refund(y2, 1000)
	r.apply(t)
	// Paid twice, its reference holding a slash: open, then dismissed.
	z1, z2 := pay("ORD/Z 7", "eur", 2500), pay("ORD/Z 7", "eur", 2500)
	r.apply(t)

	for _, token := range []string{opsToken, financeToken} {
		require.ElementsMatch(t, []string{"ord_X", "ORD/Z 7"}, references(r.doubleCharges(t, "/v1/ops/double-charges?state=open", token)))
		require.ElementsMatch(t, []string{"ord_Y"}, references(r.doubleCharges(t, "/v1/ops/double-charges?state=resolved", token)))
		require.Empty(t, r.doubleCharges(t, "/v1/ops/double-charges?state=dismissed", token))
		require.Equal(t, []string{"ORD/Z 7", "ord_Y", "ord_X"}, references(r.doubleCharges(t, "/v1/ops/double-charges?limit=1", token)),
			"every state, the most recently detected first, one a page")
	}
	byRef := map[string]doubleCharge{}
	for _, d := range r.doubleCharges(t, "/v1/ops/double-charges", financeToken) {
		byRef[d.Reference] = d
	}
	x := byRef["ord_X"]
	require.Equal(t, "open", x.State)
	require.Nil(t, x.ResolvedAt)
	require.Nil(t, x.DismissedBy)
	require.Nil(t, x.Note)
	require.WithinDuration(t, time.Now(), x.DetectedAt, time.Minute)
	// Oldest first, but payments first seen in one transaction share a
	// time: the order is not what this test is about.
	require.ElementsMatch(t, []doubleChargePayment{
		{ID: x1.ID, Provider: "stripe", Status: "succeeded", Currency: "usd", AmountCaptured: "360.00", AmountRefunded: "0.00"},
		{ID: x2.ID, Provider: "stripe", Status: "succeeded", Currency: "jpy", AmountCaptured: "5000", AmountRefunded: "0"},
	}, x.Payments, "amounts at each currency's scale")
	y := byRef["ord_Y"]
	require.Equal(t, "resolved", y.State)
	require.NotNil(t, y.ResolvedAt)
	require.ElementsMatch(t, []doubleChargePayment{
		{ID: y1.ID, Provider: "stripe", Status: "succeeded", Currency: "usd", AmountCaptured: "10.00", AmountRefunded: "0.00"},
		{ID: y2.ID, Provider: "stripe", Status: "refunded", Currency: "usd", AmountCaptured: "10.00", AmountRefunded: "10.00"},
	}, y.Payments)

	for _, bad := range []string{"/v1/ops/double-charges?state=closed", "/v1/ops/double-charges?state=OPEN",
		"/v1/ops/double-charges?cursor=abc", "/v1/ops/double-charges?limit=0"} {
		rec := get(t, r.e, bad, opsToken, nil)
		require.Equal(t, http.StatusBadRequest, rec.Code, bad)
		require.Equal(t, "application/problem+json", rec.Header().Get(echo.HeaderContentType), bad)
	}
	require.Equal(t, http.StatusUnauthorized, get(t, r.e, "/v1/ops/double-charges", "", nil).Code)

	audits := func() int {
		return r.w.Count(t, `SELECT count(*) FROM ops_audit_log WHERE action = 'double_charge_dismiss'`)
	}
	z := dismissPath("ORD/Z 7")
	note := "paid in two instalments, as agreed with the customer"
	// Refused, and nothing changed.
	for _, c := range []struct {
		name, token, key, body string
		status                 int
	}{
		{"finance", financeToken, "dc-fin", `{"note":"` + note + `"}`, http.StatusForbidden},
		{"no note", opsToken, "dc-none", `{}`, http.StatusBadRequest},
		{"empty body", opsToken, "dc-empty", ``, http.StatusBadRequest},
		{"blank note", opsToken, "dc-blank", `{"note":"   "}`, http.StatusBadRequest},
		{"note too long", opsToken, "dc-long", `{"note":"` + strings.Repeat("n", 2001) + `"}`, http.StatusBadRequest},
		{"unknown field", opsToken, "dc-field", `{"note":"x","reason":"y"}`, http.StatusBadRequest},
		{"no Idempotency-Key", opsToken, "", `{"note":"` + note + `"}`, http.StatusBadRequest},
	} {
		rec := r.post(t, z, c.token, c.key, c.body)
		require.Equal(t, c.status, rec.Code, "%s: %s", c.name, rec.Body.String())
		require.Equal(t, "application/problem+json", rec.Header().Get(echo.HeaderContentType), c.name)
	}
	require.Zero(t, audits())
	require.ElementsMatch(t, []string{"ord_X", "ORD/Z 7"}, references(r.doubleCharges(t, "/v1/ops/double-charges?state=open", opsToken)))

	body := `{"note":"  ` + note + ` "}`
	rec := r.post(t, z, opsToken, "dc-z", body)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	first := rec.Body.String()
	dismissed := decodeJSON[doubleCharge](t, rec)
	require.Equal(t, "ORD/Z 7", dismissed.Reference)
	require.Equal(t, "dismissed", dismissed.State)
	require.NotNil(t, dismissed.ResolvedAt)
	require.Equal(t, note, *dismissed.Note, "the note as written, without the spaces around it")
	require.ElementsMatch(t, []string{z1.ID, z2.ID}, []string{dismissed.Payments[0].ID, dismissed.Payments[1].ID})

	var actor, provider, eventID, reason, key string
	require.NoError(t, r.w.Pool.QueryRow(ctx, `SELECT actor, provider, event_id, reason, idempotency_key
		FROM ops_audit_log WHERE action = 'double_charge_dismiss'`).Scan(&actor, &provider, &eventID, &reason, &key))
	require.Equal(t, []string{"payments", "ORD/Z 7", note, "dc-z"}, []string{provider, eventID, reason, key})
	require.Equal(t, actor, *dismissed.DismissedBy, "the audit log and the double charge name the same person")
	require.True(t, strings.HasPrefix(actor, "token:"), actor)

	// The same key answers the first dismissal again, and does nothing more.
	again := r.post(t, z, opsToken, "dc-z", body)
	require.Equal(t, http.StatusOK, again.Code, again.Body.String())
	require.Equal(t, "true", again.Header().Get(api.HeaderIdempotentReplayed))
	require.Equal(t, first, again.Body.String())
	require.Equal(t, 1, audits())

	// Another key: it is dismissed already. A resolved one cannot be
	// dismissed either; an unknown reference is not there.
	for _, c := range []struct {
		ref, key string
		status   int
		detail   string
	}{
		{"ORD/Z 7", "dc-z-again", http.StatusConflict, `the double charge of "ORD/Z 7" is dismissed`},
		{"ord_Y", "dc-y", http.StatusConflict, `the double charge of "ord_Y" is resolved`},
		{"ord_once", "dc-once", http.StatusNotFound, `no double charge has reference "ord_once"`},
		{"ord_nowhere", "dc-nowhere", http.StatusNotFound, `no double charge has reference "ord_nowhere"`},
	} {
		rec := r.post(t, dismissPath(c.ref), opsToken, c.key, `{"note":"`+note+`"}`)
		require.Equal(t, c.status, rec.Code, "%s: %s", c.ref, rec.Body.String())
		p := decodeJSON[api.Problem](t, rec)
		require.Contains(t, p.Detail, c.detail)
	}
	require.Equal(t, 1, audits())

	require.Equal(t, []string{"ord_X"}, references(r.doubleCharges(t, "/v1/ops/double-charges?state=open", financeToken)))
	require.Equal(t, []string{"ord_Y"}, references(r.doubleCharges(t, "/v1/ops/double-charges?state=resolved", financeToken)))
	listed := r.doubleCharges(t, "/v1/ops/double-charges?state=dismissed", financeToken)
	require.Equal(t, []string{"ORD/Z 7"}, references(listed))
	require.Equal(t, dismissed, listed[0], "the list shows the double charge as the dismissal answered it")

	// The audit log's route shows the entry.
	var entries struct {
		Entries []struct {
			Action  string  `json:"action"`
			EventID *string `json:"event_id"`
		} `json:"entries"`
	}
	rec = get(t, r.e, "/v1/ops/audit?provider=payments&event_id="+url.QueryEscape("ORD/Z 7"), opsToken, &entries)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	require.Len(t, entries.Entries, 1)
	require.Equal(t, "double_charge_dismiss", entries.Entries[0].Action)
}
