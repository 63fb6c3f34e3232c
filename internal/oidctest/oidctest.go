// Package oidctest serves an OpenID Connect provider for tests: mockoidc
// (github.com/oauth2-proxy/mockoidc) over HTTP on a loopback port, with
// discovery, the authorization endpoint (which signs in whoever is queued,
// without a login page), the token endpoint, and the key set, plus what
// tests of a relying party need to break: tokens for another audience or
// with another nonce, and a signing key the key set does not publish.
package oidctest

import (
	"bytes"
	"encoding/json"
	"html"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/golang-jwt/jwt/v5"
	"github.com/oauth2-proxy/mockoidc"
)

// Provider is a running provider.
type Provider struct {
	*mockoidc.MockOIDC
	// published, when set, is the key the key set publishes instead of
	// the one that signs.
	published atomic.Pointer[mockoidc.Keypair]
	// LoginPage, when true, makes the authorization endpoint show a page
	// first, whose button (#idp-continue) signs in: the navigation back
	// to the relying party then starts on the provider's site, as after a
	// real provider's password form.
	LoginPage atomic.Bool
}

// LogoutPath is the end_session_endpoint's path the discovery document
// names.
const LogoutPath = "/oidc/logout"

// Start serves a provider until t ends. Its discovery document names an
// end_session_endpoint, as Keycloak's, Okta's and Entra ID's do.
func Start(t testing.TB) *Provider {
	t.Helper()
	m, err := mockoidc.NewServer(nil)
	if err != nil {
		t.Fatalf("oidctest: %v", err)
	}
	p := &Provider{MockOIDC: m}
	if err := m.AddMiddleware(p.middleware); err != nil {
		t.Fatalf("oidctest: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("oidctest: %v", err)
	}
	if err := m.Start(ln, nil); err != nil {
		t.Fatalf("oidctest: %v", err)
	}
	t.Cleanup(func() { _ = m.Shutdown() })
	return p
}

func (p *Provider) middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case mockoidc.AuthorizationEndpoint:
			if p.LoginPage.Load() && r.URL.Query().Get("idp_continue") == "" {
				loginPage(w, r)
				return
			}
		case mockoidc.JWKSEndpoint:
			if k := p.published.Load(); k != nil {
				jwks, err := k.JWKS()
				if err != nil {
					http.Error(w, err.Error(), http.StatusInternalServerError)
					return
				}
				w.Header().Set("Content-Type", "application/json")
				_, _ = w.Write(jwks)
				return
			}
		case mockoidc.DiscoveryEndpoint:
			rec := httptest.NewRecorder()
			next.ServeHTTP(rec, r)
			var doc map[string]any
			if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &doc) != nil {
				w.WriteHeader(rec.Code)
				_, _ = w.Write(rec.Body.Bytes())
				return
			}
			doc["end_session_endpoint"] = p.Addr() + LogoutPath
			body, _ := json.Marshal(doc)
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(body)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func loginPage(w http.ResponseWriter, r *http.Request) {
	var b bytes.Buffer
	b.WriteString(`<!doctype html><title>Sign in</title><form method="get" action="` + mockoidc.AuthorizationEndpoint + `">`)
	for k, vs := range r.URL.Query() {
		for _, v := range vs {
			b.WriteString(`<input type="hidden" name="` + html.EscapeString(k) + `" value="` + html.EscapeString(v) + `">`)
		}
	}
	b.WriteString(`<input type="hidden" name="idp_continue" value="1"><button id="idp-continue">Continue</button></form>`)
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = w.Write(b.Bytes())
}

// Person queues whom the next authorization signs in: subject, email
// (verified) and groups.
func (p *Provider) Person(subject, email string, groups ...string) *mockoidc.MockUser {
	u := &mockoidc.MockUser{Subject: subject, Email: email, EmailVerified: true, Groups: groups}
	p.QueueUser(u)
	return u
}

// Tampered is a person whose ID token the provider signs with another
// audience or nonce than the sign-in's, or with an email it says it did
// not verify.
type Tampered struct {
	*mockoidc.MockUser
	Audience string // "": the client's
	Nonce    string // "": the sign-in's
	// UnverifiedEmail: the token says "email_verified": false (mockoidc
	// leaves a false out).
	UnverifiedEmail bool
}

type unverifiedClaims struct {
	*mockoidc.IDTokenClaims
	Email         string   `json:"email"`
	EmailVerified bool     `json:"email_verified"`
	Groups        []string `json:"groups,omitempty"`
}

// Claims implements mockoidc.User.
func (u Tampered) Claims(scope []string, claims *mockoidc.IDTokenClaims) (jwt.Claims, error) {
	if u.Audience != "" {
		claims.Audience = jwt.ClaimStrings{u.Audience}
	}
	if u.Nonce != "" {
		claims.Nonce = u.Nonce
	}
	if u.UnverifiedEmail {
		return unverifiedClaims{IDTokenClaims: claims, Email: u.Email, Groups: u.Groups}, nil
	}
	return u.MockUser.Claims(scope, claims)
}

// Rotate replaces the provider's signing key with a new one, which the key
// set publishes from now on (the old one no longer).
func (p *Provider) Rotate(t testing.TB) {
	t.Helper()
	k, err := mockoidc.RandomKeypair(2048)
	if err != nil {
		t.Fatalf("oidctest: %v", err)
	}
	p.Keypair = k
	p.published.Store(nil)
}

// SignWithUnpublished makes the provider sign with a new key that its key
// set does not publish: it keeps publishing the key it had.
func (p *Provider) SignWithUnpublished(t testing.TB) {
	t.Helper()
	k, err := mockoidc.RandomKeypair(2048)
	if err != nil {
		t.Fatalf("oidctest: %v", err)
	}
	p.published.Store(p.Keypair)
	p.Keypair = k
}

// Authorize follows authURL (the relying party's redirect to the
// provider) as a browser would, up to the provider's redirect back, and
// answers where that redirect goes: the callback with code and state.
func Authorize(t testing.TB, authURL string) string {
	t.Helper()
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Get(authURL)
	if err != nil {
		t.Fatalf("oidctest: authorize: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusFound {
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		t.Fatalf("oidctest: authorize answered %d: %s", resp.StatusCode, b.String())
	}
	return resp.Header.Get("Location")
}
