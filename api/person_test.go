package api_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/api"
)

var alice = api.Person{Name: "alice@example.com", Issuer: "https://id.example.com", Subject: "248289761001", Ops: true}

// asPerson sends one in-process request made with api.WithPerson, as the
// console does for a person's session; token, when not "", is sent too.
func (b *opsBundle) asPerson(t *testing.T, p api.Person, method, path, token, key, body string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequestWithContext(api.WithPerson(context.Background(), p), method, path, strings.NewReader(body))
	req.RemoteAddr = "198.51.100.7:4000"
	if body != "" {
		req.Header.Set(echo.HeaderContentType, echo.MIMEApplicationJSON)
	}
	if token != "" {
		req.Header.Set(echo.HeaderAuthorization, "Bearer "+token)
	}
	if key != "" {
		req.Header.Set(api.HeaderIdempotencyKey, key)
	}
	rec := httptest.NewRecorder()
	b.echo.ServeHTTP(rec, req)
	return rec
}

// TestAPersonIsTheCaller: a request the console makes for a person's
// session carries no token, and the person is its caller: GET /v1/me
// names them with their roles, and the audit log names them.
func TestAPersonIsTheCaller(t *testing.T) {
	t.Parallel()
	b := setupOps(t)
	me := decodeJSON[api.MeView](t, b.asPerson(t, alice, http.MethodGet, "/v1/me", "", "", ""))
	require.Equal(t, api.MeView{Identity: "alice@example.com", Roles: []api.Role{api.RoleOps}}, me)

	b.seed(t, "evt_person", seedOpts{lastError: "boom"})
	rec := b.asPerson(t, alice, http.MethodPost, "/v1/ops/events/stripe/evt_person/discard", "", "person-1", `{"reason":"a test event"}`)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	var actor string
	require.NoError(t, b.pool.QueryRow(context.Background(),
		`SELECT actor FROM ops_audit_log WHERE event_id = 'evt_person'`).Scan(&actor))
	require.Equal(t, "alice@example.com", actor)

	finance := api.Person{Name: "fred@example.com", Issuer: alice.Issuer, Subject: "fred", Finance: true}
	require.Equal(t, http.StatusForbidden, b.asPerson(t, finance, http.MethodGet, "/v1/ops/stats", "", "", "").Code,
		"a person has their roles and no other")
	require.Equal(t, http.StatusOK, b.asPerson(t, finance, http.MethodGet, "/v1/reconciliation/runs", "", "", "").Code)
}

// TestAPersonIsNeverTwoCallers: a person's request that also brings a
// token, or a person without a subject or a role, is refused.
func TestAPersonIsNeverTwoCallers(t *testing.T) {
	t.Parallel()
	b := setupOps(t)
	require.Equal(t, http.StatusUnauthorized, b.asPerson(t, alice, http.MethodGet, "/v1/me", opsTok, "", "").Code)
	for name, p := range map[string]api.Person{
		"no subject": {Name: "a@example.com", Issuer: alice.Issuer, Ops: true},
		"no name":    {Issuer: alice.Issuer, Subject: "s", Ops: true},
		"no issuer":  {Name: "a@example.com", Subject: "s", Ops: true},
		"no role":    {Name: "a@example.com", Issuer: alice.Issuer, Subject: "s"},
	} {
		require.Equal(t, http.StatusUnauthorized, b.asPerson(t, p, http.MethodGet, "/v1/me", "", "", "").Code, name)
	}
}

// TestAPersonsIdempotencyKeysAreTheirOwn: a person known by their subject
// alone has a name a token's operator may have too; their keys are still
// apart, so neither replays the other's answer.
func TestAPersonsIdempotencyKeysAreTheirOwn(t *testing.T) {
	t.Parallel()
	b := setupOps(t, func(c *api.Config) { c.OpsTokens = []string{"bob:bob-ops-token"} })
	b.seed(t, "evt_bob_1", seedOpts{lastError: "boom"})
	b.seed(t, "evt_bob_2", seedOpts{lastError: "boom"})
	rec := b.do(t, http.MethodPost, "/v1/ops/events/stripe/evt_bob_1/discard", "bob-ops-token", "same-key", `{"reason":"one"}`)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	bob := api.Person{Name: "bob", Issuer: alice.Issuer, Subject: "bob", Ops: true}
	rec = b.asPerson(t, bob, http.MethodPost, "/v1/ops/events/stripe/evt_bob_2/discard", "", "same-key", `{"reason":"two"}`)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	require.Empty(t, rec.Header().Get(api.HeaderIdempotentReplayed))
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM ops_audit_log WHERE event_id = 'evt_bob_2'`))
}

// TestAPersonIsNotLimitedByOthersWrongTokens: the limit on failed
// authentications refuses guessed tokens from an address; a person the
// identity provider signed in guessed nothing, and passes.
func TestAPersonIsNotLimitedByOthersWrongTokens(t *testing.T) {
	t.Parallel()
	b := setupOps(t, func(c *api.Config) { c.AuthFailureLimit = 1 })
	wrong := func() int {
		req := httptest.NewRequest(http.MethodGet, "/v1/me", nil)
		req.RemoteAddr = "198.51.100.7:4000"
		req.Header.Set(echo.HeaderAuthorization, "Bearer wrong")
		rec := httptest.NewRecorder()
		b.echo.ServeHTTP(rec, req)
		return rec.Code
	}
	require.Equal(t, http.StatusUnauthorized, wrong())
	require.Equal(t, http.StatusTooManyRequests, wrong())
	require.Equal(t, http.StatusOK, b.asPerson(t, alice, http.MethodGet, "/v1/me", "", "", "").Code)
}
