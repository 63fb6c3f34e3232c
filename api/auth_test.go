package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/api"
)

func TestCheckTokens(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]struct {
		ops, finance []string
		ok           bool
	}{
		"bare tokens":                       {ops: []string{"a", "b"}, finance: []string{"c"}, ok: true},
		"named tokens":                      {ops: []string{"alice:a", "bob.b_2-x:b"}, finance: []string{"carol:c", "d"}, ok: true},
		"one operator with both roles":      {ops: []string{"alice:a"}, finance: []string{"alice:a"}, ok: true},
		"a bare token with both roles":      {ops: []string{"a"}, finance: []string{"a"}, ok: true},
		"a name twice in a role":            {ops: []string{"alice:a", "alice:b"}},
		"a name twice, even the same token": {ops: []string{"alice:a", "alice:a"}},
		"a name with two tokens":            {ops: []string{"alice:a"}, finance: []string{"alice:b"}},
		"a token under two names":           {ops: []string{"alice:a", "bob:a"}},
		"a token bare and named":            {ops: []string{"a"}, finance: []string{"alice:a"}},
		"an upper-case name":                {ops: []string{"Alice:a"}},
		"a name with a space":               {ops: []string{"al ice:a"}},
		"an empty name":                     {ops: []string{":a"}},
		"no token after the name":           {ops: []string{"alice:"}},
	} {
		err := api.CheckTokens(c.ops, c.finance)
		if c.ok {
			require.NoError(t, err, name)
			continue
		}
		require.ErrorIs(t, err, api.ErrTokenConfig, name)
		for _, entry := range append(c.ops, c.finance...) {
			if _, tok, ok := strings.Cut(entry, ":"); ok && tok != "" {
				require.NotContains(t, err.Error(), ":"+tok, "%s: the error never shows a token", name)
			}
		}
	}
	err := api.CheckTokens([]string{"alice:secret-one"}, []string{"alice:secret-two"})
	require.ErrorContains(t, err, "PAYGATE_FINANCE_TOKENS entry 1 (alice)", "the entry is named")
	require.NotContains(t, err.Error(), "secret")
}

func TestNamedOperatorsAreTheAuditActor(t *testing.T) {
	t.Parallel()
	b := setupOps(t, func(c *api.Config) {
		c.OpsTokens = []string{"alice:alice-secret-token", opsTok}
		c.FinanceTokens = []string{"alice:alice-secret-token", financeTok}
	})
	b.seed(t, "evt_named", seedOpts{lastError: "boom"})
	rec := b.do(t, http.MethodPost, "/v1/ops/events/stripe/evt_named/replay", "alice-secret-token", "named-1", `{"reason":"fixed"}`)
	require.Equal(t, http.StatusAccepted, rec.Code, rec.Body.String())
	rec = b.do(t, http.MethodPost, "/v1/ops/events/stripe/evt_named/replay", opsTok, "bare-1", `{"reason":"again"}`)
	require.Equal(t, http.StatusAccepted, rec.Code, rec.Body.String())

	var actors []string
	rows, err := b.pool.Query(context.Background(), `SELECT actor FROM ops_audit_log WHERE event_id = 'evt_named' ORDER BY id`)
	require.NoError(t, err)
	for rows.Next() {
		var a string
		require.NoError(t, rows.Scan(&a))
		actors = append(actors, a)
	}
	require.NoError(t, rows.Err())
	require.Len(t, actors, 2)
	require.Equal(t, "alice", actors[0], "a named token's caller is its name")
	require.True(t, strings.HasPrefix(actors[1], "token:"), "a bare token keeps its identity: %s", actors[1])

	require.Equal(t, http.StatusOK, b.do(t, http.MethodGet, "/v1/reconciliation/runs", "alice-secret-token", "", "").Code)
	require.Equal(t, http.StatusNotFound, b.do(t, http.MethodGet, "/v1/reconciliation/runs/1", "alice-secret-token", "", "").Code,
		"alice has the finance role too")
	require.Equal(t, http.StatusUnauthorized, b.do(t, http.MethodGet, "/v1/ops/stats", "alice:alice-secret-token", "", "").Code,
		"the name is not part of the token")
}

func TestInvalidTokensAdmitNobody(t *testing.T) {
	t.Parallel()
	b := setupOps(t, func(c *api.Config) { c.OpsTokens = []string{"alice:" + opsTok, "alice:" + otherOpsTok} })
	for _, tok := range []string{opsTok, otherOpsTok, financeTok} {
		require.Equal(t, http.StatusUnauthorized, b.do(t, http.MethodGet, "/v1/ops/stats", tok, "", "").Code)
	}
	require.True(t, errors.Is(api.CheckTokens([]string{"alice:" + opsTok, "alice:" + otherOpsTok}, nil), api.ErrTokenConfig))
}

// TestMeNamesTheCallerAndItsRoles: GET /v1/me answers the identity the
// audit log will name and the token's roles.
func TestMeNamesTheCallerAndItsRoles(t *testing.T) {
	t.Parallel()
	b := setupOps(t)
	for token, roles := range map[string][]api.Role{opsTok: {api.RoleOps}, financeTok: {api.RoleFinance}} {
		var me api.MeView
		rec := b.do(t, http.MethodGet, "/v1/me", token, "", "")
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &me))
		require.Equal(t, roles, me.Roles)
		require.NotEmpty(t, me.Identity)
		require.NotContains(t, rec.Body.String(), token, "the token itself is never answered")
	}
	require.Equal(t, http.StatusUnauthorized, b.do(t, http.MethodGet, "/v1/me", "nope", "", "").Code)
}
