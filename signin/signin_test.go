package signin_test

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/oauth2-proxy/mockoidc"
	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/internal/oidctest"
	"github.com/paygate/paygate/internal/testdb"
	"github.com/paygate/paygate/signin"
)

const redirect = "https://paygate.example.com/console/oidc/callback"

type testBundle struct {
	idp  *oidctest.Provider
	pool *pgxpool.Pool
	p    *signin.Provider
}

func setup(t *testing.T, opts ...func(*signin.Config)) *testBundle {
	t.Helper()
	idp := oidctest.Start(t)
	pool := testdb.New(t)
	roles, err := signin.ParseRoles("ops=paygate-ops,finance=paygate-finance,finance=accounts")
	require.NoError(t, err)
	cfg := signin.Config{
		Issuer: idp.Issuer(), ClientID: idp.ClientID, ClientSecret: idp.ClientSecret, RedirectURL: redirect,
		Scopes: []string{"email", "profile", "groups"}, Roles: roles, Pool: pool,
	}
	for _, o := range opts {
		o(&cfg)
	}
	p, err := signin.New(cfg)
	require.NoError(t, err)
	return &testBundle{idp: idp, pool: pool, p: p}
}

// signIn begins a flow, lets the provider sign in whoever is queued, and
// answers the flow's cookie and the provider's answer (the callback's
// query), for the test to finish as it likes.
func (b *testBundle) signIn(t *testing.T) (cookie string, answer url.Values) {
	t.Helper()
	flow, err := b.p.Begin(context.Background())
	require.NoError(t, err)
	auth, err := url.Parse(flow.AuthURL)
	require.NoError(t, err)
	q := auth.Query()
	require.Equal(t, "S256", q.Get("code_challenge_method"), "PKCE")
	require.NotEmpty(t, q.Get("code_challenge"))
	require.NotEmpty(t, q.Get("nonce"))
	require.NotEmpty(t, q.Get("state"))
	require.Equal(t, redirect, q.Get("redirect_uri"))
	require.NotContains(t, flow.AuthURL, strings.Split(flow.Cookie, ".")[2], "the verifier never leaves the server's side")
	back, err := url.Parse(oidctest.Authorize(t, flow.AuthURL))
	require.NoError(t, err)
	require.Equal(t, redirect, back.Scheme+"://"+back.Host+back.Path)
	return flow.Cookie, back.Query()
}

func (b *testBundle) finish(t *testing.T) (signin.Person, error) {
	t.Helper()
	cookie, answer := b.signIn(t)
	return b.p.Finish(context.Background(), cookie, answer)
}

func (b *testBundle) flows(t *testing.T) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT count(*) FROM console_signin_flows`).Scan(&n))
	return n
}

func TestSignInMapsTheGroupsToRoles(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, c := range []struct {
		groups       []string
		ops, finance bool
	}{
		{[]string{"engineering", "paygate-ops"}, true, false},
		{[]string{"paygate-finance"}, false, true},
		{[]string{"accounts"}, false, true},
		{[]string{"paygate-ops", "accounts"}, true, true},
		{[]string{"engineering", "Paygate-Ops"}, false, false},
		{nil, false, false},
	} {
		b.idp.Person("sub-1", "ann@example.com", c.groups...)
		person, err := b.finish(t)
		require.NoError(t, err, "%v", c.groups)
		require.Equal(t, signin.Person{Issuer: b.idp.Issuer(), Subject: "sub-1", Email: "ann@example.com",
			Groups: c.groups, Ops: c.ops, Finance: c.finance}, person, "%v", c.groups)
		require.Equal(t, "ann@example.com", person.Name())
	}
	require.Zero(t, b.flows(t), "every finished flow is gone")
}

func TestSignInNamesAPersonByAnUnverifiedEmailNever(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.idp.QueueUser(oidctest.Tampered{MockUser: &mockoidc.MockUser{Subject: "sub-2", Email: "mallory@example.com",
		Groups: []string{"paygate-ops"}}, UnverifiedEmail: true})
	person, err := b.finish(t)
	require.NoError(t, err)
	require.Empty(t, person.Email)
	require.Equal(t, "sub-2", person.Name(), "the subject, when the email is not vouched for")
}

func TestSignInRefusesAWrongState(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.idp.Person("sub-1", "ann@example.com", "paygate-ops")
	cookie, answer := b.signIn(t)
	forged := url.Values{"code": answer["code"], "state": {"not-" + answer.Get("state")}}
	_, err := b.p.Finish(context.Background(), cookie, forged)
	require.ErrorIs(t, err, signin.ErrState)
	_, err = b.p.Finish(context.Background(), "", answer)
	require.ErrorIs(t, err, signin.ErrState, "no flow cookie")

	// Another flow's cookie (its own state) with this answer.
	b.idp.Person("sub-2", "bob@example.com", "paygate-ops")
	other, _ := b.signIn(t)
	_, err = b.p.Finish(context.Background(), other, answer)
	require.ErrorIs(t, err, signin.ErrState)

	// A cookie whose nonce or verifier was changed is not one this
	// service started.
	parts := strings.Split(cookie, ".")
	_, err = b.p.Finish(context.Background(), parts[0]+".x"+parts[1]+"."+parts[2], answer)
	require.ErrorIs(t, err, signin.ErrFlowUsed)
}

func TestSignInRefusesAReplayedCode(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.idp.Person("sub-1", "ann@example.com", "paygate-ops")
	cookie, answer := b.signIn(t)
	_, err := b.p.Finish(context.Background(), cookie, answer)
	require.NoError(t, err)
	_, err = b.p.Finish(context.Background(), cookie, answer)
	require.ErrorIs(t, err, signin.ErrFlowUsed, "the same callback again")

	// The code again, in a flow of its own: the provider refuses it.
	b.idp.Person("sub-1", "ann@example.com", "paygate-ops")
	fresh, freshAnswer := b.signIn(t)
	_, err = b.p.Finish(context.Background(), fresh, url.Values{"code": answer["code"], "state": freshAnswer["state"]})
	require.ErrorIs(t, err, signin.ErrExchange)
}

func TestSignInRefusesAnIDTokenForAnotherAudience(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.idp.QueueUser(oidctest.Tampered{MockUser: &mockoidc.MockUser{Subject: "sub-1", Groups: []string{"paygate-ops"}},
		Audience: "another-client"})
	_, err := b.finish(t)
	require.ErrorIs(t, err, signin.ErrIDToken)
	require.ErrorContains(t, err, "audience")
}

func TestSignInRefusesAnIDTokenWithAnotherNonce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.idp.QueueUser(oidctest.Tampered{MockUser: &mockoidc.MockUser{Subject: "sub-1", Groups: []string{"paygate-ops"}},
		Nonce: "a-nonce-of-another-sign-in"})
	_, err := b.finish(t)
	require.ErrorIs(t, err, signin.ErrIDToken)
	require.ErrorContains(t, err, "nonce")
}

func TestSignInRefusesAnExpiredIDToken(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// The provider's clock an hour behind: its ID tokens (ten minutes'
	// life) are issued expired.
	b.idp.FastForward(-time.Hour)
	b.idp.Person("sub-1", "ann@example.com", "paygate-ops")
	_, err := b.finish(t)
	require.ErrorIs(t, err, signin.ErrIDToken)
	var expired *oidc.TokenExpiredError
	require.True(t, errors.As(err, &expired), "%v", err)
}

// TestSignInFollowsTheProvidersKeys: once the provider rotates its key,
// tokens it signs with the new one are verified (the key set is fetched
// again), and a token signed with a key it does not publish is refused.
func TestSignInFollowsTheProvidersKeys(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.idp.Person("sub-1", "ann@example.com", "paygate-ops")
	_, err := b.finish(t)
	require.NoError(t, err, "the first key")

	b.idp.Rotate(t)
	b.idp.Person("sub-1", "ann@example.com", "paygate-ops")
	_, err = b.finish(t)
	require.NoError(t, err, "the rotated key, fetched when a token names it")

	b.idp.SignWithUnpublished(t)
	b.idp.Person("sub-1", "ann@example.com", "paygate-ops")
	_, err = b.finish(t)
	require.ErrorIs(t, err, signin.ErrIDToken)
	require.ErrorContains(t, err, "signature")
}

func TestSignInTakesTheProvidersRefusal(t *testing.T) {
	t.Parallel()
	b := setup(t)
	flow, err := b.p.Begin(context.Background())
	require.NoError(t, err)
	auth, _ := url.Parse(flow.AuthURL)
	_, err = b.p.Finish(context.Background(), flow.Cookie, url.Values{"state": {auth.Query().Get("state")},
		"error": {"access_denied"}, "error_description": {"the person cancelled"}})
	var refused *signin.ProviderError
	require.True(t, errors.As(err, &refused), "%v", err)
	require.Equal(t, "access_denied", refused.Code)
	require.Zero(t, b.flows(t), "a refused flow is finished too")
}

func TestSignInFlowsExpire(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *signin.Config) { c.FlowTTL = time.Second })
	b.idp.Person("sub-1", "ann@example.com", "paygate-ops")
	cookie, answer := b.signIn(t)
	time.Sleep(1100 * time.Millisecond)
	_, err := b.p.Finish(context.Background(), cookie, answer)
	require.ErrorIs(t, err, signin.ErrFlowUsed)
	_, _ = b.signIn(t) // the expired flows are deleted when one begins
	require.Equal(t, 1, b.flows(t))
}

func TestSignInWaitsForAnUnreachableProvider(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	p, err := signin.New(signin.Config{Issuer: "http://127.0.0.1:1/oidc", ClientID: "c", ClientSecret: "s",
		RedirectURL: redirect, Pool: pool, HTTPClient: &http.Client{Timeout: 2 * time.Second}})
	require.NoError(t, err, "New does not call the provider")
	_, err = p.Begin(context.Background())
	require.ErrorIs(t, err, signin.ErrUnavailable)
	require.Empty(t, p.LogoutURL(context.Background(), "https://paygate.example.com/console/signin"))
}

func TestLogoutURLIsTheProvidersEndSession(t *testing.T) {
	t.Parallel()
	b := setup(t)
	u, err := url.Parse(b.p.LogoutURL(context.Background(), "https://paygate.example.com/console/signin"))
	require.NoError(t, err)
	require.Equal(t, b.idp.Addr()+oidctest.LogoutPath, u.Scheme+"://"+u.Host+u.Path)
	require.Equal(t, b.idp.ClientID, u.Query().Get("client_id"))
	require.Equal(t, "https://paygate.example.com/console/signin", u.Query().Get("post_logout_redirect_uri"))
}

func TestNewRefusesAnIncompleteConfig(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	full := signin.Config{Issuer: "https://id.example.com", ClientID: "c", ClientSecret: "s", RedirectURL: redirect, Pool: pool}
	for name, change := range map[string]func(*signin.Config){
		"no issuer":        func(c *signin.Config) { c.Issuer = "" },
		"no client":        func(c *signin.Config) { c.ClientID = "" },
		"no secret":        func(c *signin.Config) { c.ClientSecret = "" },
		"no redirect":      func(c *signin.Config) { c.RedirectURL = "" },
		"a relative URL":   func(c *signin.Config) { c.RedirectURL = "/console/oidc/callback" },
		"no pool to share": func(c *signin.Config) { c.Pool = nil },
	} {
		cfg := full
		change(&cfg)
		_, err := signin.New(cfg)
		require.ErrorIs(t, err, signin.ErrConfig, name)
	}
	_, err := signin.New(full)
	require.NoError(t, err)
}
