// Package signin signs people in to the console through the company's
// OpenID Connect provider: the authorization code flow with PKCE, its state
// and nonce checked, the ID token's signature, issuer, audience and expiry
// verified by go-oidc against the provider's discovery document and keys
// (refetched when the provider rotates them), and the person's console
// roles mapped from one of its claims.
//
// It must never keep a password (it never sees one) nor trust an ID token
// it did not verify. The console keeps the session it starts for the
// person; this package keeps only the flows on their way through the
// provider (console_signin_flows), so that each is finished once.
package signin

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/oauth2"
)

// Config configures sign-in with one OpenID Connect provider.
type Config struct {
	// Issuer is the provider's issuer URL (PAYGATE_OIDC_ISSUER): its
	// discovery document is Issuer + /.well-known/openid-configuration,
	// and every ID token must name it.
	Issuer string
	// ClientID and ClientSecret are paygate's client at the provider
	// (PAYGATE_OIDC_CLIENT_ID, PAYGATE_OIDC_CLIENT_SECRET); ID tokens must
	// be for ClientID.
	ClientID     string
	ClientSecret string
	// RedirectURL is where the provider sends the browser back:
	// <PAYGATE_PUBLIC_URL>/console/oidc/callback, registered at the
	// provider.
	RedirectURL string
	// Scopes are asked for besides openid; default email and profile.
	Scopes []string
	// RolesClaim names the claim whose values Roles maps
	// (PAYGATE_OIDC_ROLES_CLAIM); default DefaultRolesClaim.
	RolesClaim string
	Roles      Roles
	// Pool keeps the flows under way (console_signin_flows), shared by
	// every instance: the provider may send the browser back to another.
	Pool *pgxpool.Pool
	// HTTPClient calls the provider (discovery, keys, the token
	// endpoint); default a client with a 10 s timeout.
	HTTPClient *http.Client
	// FlowTTL is how long a person has at the provider before the flow
	// ends; default 10 minutes.
	FlowTTL time.Duration
	Logger  *slog.Logger
}

// Errors of New and Finish.
var (
	// ErrConfig: Config lacks the issuer, the client, the redirect URL or
	// the pool.
	ErrConfig = errors.New("signin: incomplete configuration")
	// ErrUnavailable: the provider's discovery document could not be
	// read (the provider is down, or the issuer is wrong).
	ErrUnavailable = errors.New("the identity provider cannot be reached")
	// ErrState: the answer does not belong to this browser's flow (no
	// flow cookie, or a state that is not the cookie's).
	ErrState = errors.New("the sign-in's state does not match this browser's")
	// ErrFlowUsed: the flow was finished already (a replayed callback)
	// or has expired, or this service never started it.
	ErrFlowUsed = errors.New("the sign-in was already used or has expired")
	// ErrExchange: the provider did not give tokens for the code (a code
	// used before, a wrong verifier, a refused client).
	ErrExchange = errors.New("the identity provider did not accept the sign-in's code")
	// ErrIDToken: the ID token failed verification (signature, issuer,
	// audience, expiry or nonce), or there was none.
	ErrIDToken = errors.New("the identity provider's ID token was refused")
)

// ProviderError is the provider's own refusal sent back to the callback
// (error=access_denied when the person cancels, say).
type ProviderError struct {
	Code        string
	Description string
}

func (e *ProviderError) Error() string {
	if e.Description != "" {
		return fmt.Sprintf("the identity provider refused the sign-in: %s (%s)", e.Code, e.Description)
	}
	return "the identity provider refused the sign-in: " + e.Code
}

// Person is whom a verified ID token names.
type Person struct {
	Issuer  string
	Subject string
	// Email is the token's email claim, unless the token says the
	// provider did not verify it.
	Email string
	// Groups are the values of the roles claim, as the token listed them.
	Groups       []string
	Ops, Finance bool
}

// Name is what the audit log calls the person: their email, else their
// subject.
func (p Person) Name() string {
	if p.Email != "" {
		return p.Email
	}
	return p.Subject
}

// Provider is one OpenID Connect provider, discovered at first use.
type Provider struct {
	cfg Config

	mu   sync.Mutex
	disc *discovered
}

type discovered struct {
	oauth    oauth2.Config
	verifier *oidc.IDTokenVerifier
	// endSession is the provider's end_session_endpoint, "" when it
	// publishes none (Google).
	endSession string
}

// New checks cfg and builds the provider without calling it: discovery
// happens at first use (Discover), so a provider that is briefly down does
// not stop paygate from starting. It fails with ErrConfig.
func New(cfg Config) (*Provider, error) {
	cfg.Issuer = strings.TrimSpace(cfg.Issuer)
	if cfg.Issuer == "" || cfg.ClientID == "" || cfg.ClientSecret == "" || cfg.RedirectURL == "" || cfg.Pool == nil {
		return nil, ErrConfig
	}
	if u, err := url.Parse(cfg.RedirectURL); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, fmt.Errorf("%w: the redirect URL %q is not an http(s) URL", ErrConfig, cfg.RedirectURL)
	}
	if cfg.Roles.byRole == nil {
		r, err := ParseRoles("")
		if err != nil {
			return nil, err
		}
		cfg.Roles = r
	}
	if cfg.RolesClaim == "" {
		cfg.RolesClaim = DefaultRolesClaim
	}
	if cfg.Scopes == nil {
		cfg.Scopes = []string{oidc.ScopeEmail, oidc.ScopeProfile}
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Timeout: 10 * time.Second}
	}
	if cfg.FlowTTL <= 0 {
		cfg.FlowTTL = 10 * time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Provider{cfg: cfg}, nil
}

// Issuer is the provider's issuer URL: a session names it, and one from
// another issuer is not this provider's.
func (p *Provider) Issuer() string { return p.cfg.Issuer }

// RolesClaim names the claim the roles come from.
func (p *Provider) RolesClaim() string { return p.cfg.RolesClaim }

// Roles is the mapping of the claim's values to roles.
func (p *Provider) Roles() Roles { return p.cfg.Roles }

// FlowTTL is how long a flow lasts: its cookie's age.
func (p *Provider) FlowTTL() time.Duration { return p.cfg.FlowTTL }

func (p *Provider) clientContext(ctx context.Context) context.Context {
	return oidc.ClientContext(ctx, p.cfg.HTTPClient)
}

// Discover reads the provider's discovery document, once: after a
// success, the provider is known for this process's life (its keys are
// refetched as they rotate). It fails with ErrUnavailable.
func (p *Provider) Discover(ctx context.Context) error {
	_, err := p.discovered(ctx)
	return err
}

func (p *Provider) discovered(ctx context.Context) (*discovered, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.disc != nil {
		return p.disc, nil
	}
	// The key set lives as long as the provider and fetches with the
	// context given here: never a request's, which ends.
	op, err := oidc.NewProvider(p.clientContext(context.WithoutCancel(ctx)), p.cfg.Issuer)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrUnavailable, p.cfg.Issuer, err)
	}
	var meta struct {
		EndSession string `json:"end_session_endpoint"`
	}
	if err := op.Claims(&meta); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrUnavailable, p.cfg.Issuer, err)
	}
	scopes := []string{oidc.ScopeOpenID}
	for _, s := range p.cfg.Scopes {
		if s != "" && !slices.Contains(scopes, s) {
			scopes = append(scopes, s)
		}
	}
	p.disc = &discovered{
		oauth: oauth2.Config{
			ClientID: p.cfg.ClientID, ClientSecret: p.cfg.ClientSecret,
			Endpoint: op.Endpoint(), RedirectURL: p.cfg.RedirectURL, Scopes: scopes,
		},
		verifier:   op.Verifier(&oidc.Config{ClientID: p.cfg.ClientID}),
		endSession: meta.EndSession,
	}
	return p.disc, nil
}

// Flow is a sign-in on its way to the provider: send the browser to
// AuthURL, with Cookie set for the callback.
type Flow struct {
	AuthURL string
	// Cookie holds the flow's state, nonce and PKCE verifier; it comes
	// back with the provider's redirect, and only to the callback.
	Cookie string
}

func random() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	return base64.RawURLEncoding.EncodeToString(b)
}

func flowHash(cookie string) []byte {
	h := sha256.Sum256([]byte(cookie))
	return h[:]
}

// Begin starts a flow: a fresh state, nonce and PKCE verifier, recorded
// (as the hash of the cookie that carries them) so that the answer is
// taken once. It fails with ErrUnavailable, or when the flow cannot be
// recorded.
func (p *Provider) Begin(ctx context.Context) (Flow, error) {
	d, err := p.discovered(ctx)
	if err != nil {
		return Flow{}, err
	}
	state, nonce, verifier := random(), random(), oauth2.GenerateVerifier()
	cookie := strings.Join([]string{state, nonce, verifier}, ".")
	if _, err := p.cfg.Pool.Exec(ctx, `INSERT INTO console_signin_flows (flow_hash, expires_at)
		VALUES ($1, now() + $2)`, flowHash(cookie), p.cfg.FlowTTL); err != nil {
		return Flow{}, fmt.Errorf("record sign-in flow: %w", err)
	}
	if _, err := p.cfg.Pool.Exec(ctx, `DELETE FROM console_signin_flows WHERE expires_at <= now()`); err != nil {
		p.cfg.Logger.Warn("signin: delete expired flows", "error", err.Error())
	}
	return Flow{
		AuthURL: d.oauth.AuthCodeURL(state, oidc.Nonce(nonce), oauth2.S256ChallengeOption(verifier)),
		Cookie:  cookie,
	}, nil
}

// Finish takes the provider's answer (the callback's query) for the flow
// whose cookie the browser brought: the state must be the cookie's, the
// flow not finished before (it is finished now, whatever follows), the
// code exchanged with the flow's verifier, and the ID token verified,
// its nonce the flow's. It answers the person the token names, with the
// roles their claim maps to (perhaps none: the caller refuses them). It
// fails with ErrState, ErrFlowUsed, a *ProviderError, ErrUnavailable,
// ErrExchange or ErrIDToken.
func (p *Provider) Finish(ctx context.Context, cookie string, query url.Values) (Person, error) {
	parts := strings.Split(cookie, ".")
	if len(parts) != 3 || slices.Contains(parts, "") {
		return Person{}, ErrState
	}
	state, nonce, verifier := parts[0], parts[1], parts[2]
	if subtle.ConstantTimeCompare([]byte(state), []byte(query.Get("state"))) != 1 {
		return Person{}, ErrState
	}
	// Finished here, before the code is used: an answer replayed at the
	// same time as the first finds no row either.
	var live bool
	err := p.cfg.Pool.QueryRow(ctx, `DELETE FROM console_signin_flows WHERE flow_hash = $1
		RETURNING expires_at > now()`, flowHash(cookie)).Scan(&live)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && !live) {
		return Person{}, ErrFlowUsed
	}
	if err != nil {
		return Person{}, fmt.Errorf("finish sign-in flow: %w", err)
	}
	if code := query.Get("error"); code != "" {
		return Person{}, &ProviderError{Code: code, Description: query.Get("error_description")}
	}
	code := query.Get("code")
	if code == "" {
		return Person{}, fmt.Errorf("%w: the answer has no code", ErrExchange)
	}
	d, err := p.discovered(ctx)
	if err != nil {
		return Person{}, err
	}
	cctx := p.clientContext(ctx)
	tok, err := d.oauth.Exchange(cctx, code, oauth2.VerifierOption(verifier))
	if err != nil {
		return Person{}, fmt.Errorf("%w: %w", ErrExchange, err)
	}
	raw, _ := tok.Extra("id_token").(string)
	if raw == "" {
		return Person{}, fmt.Errorf("%w: the token response has no id_token", ErrIDToken)
	}
	idt, err := d.verifier.Verify(cctx, raw)
	if err != nil {
		return Person{}, fmt.Errorf("%w: %w", ErrIDToken, err)
	}
	if subtle.ConstantTimeCompare([]byte(idt.Nonce), []byte(nonce)) != 1 {
		return Person{}, fmt.Errorf("%w: its nonce is not this sign-in's", ErrIDToken)
	}
	if idt.Subject == "" {
		return Person{}, fmt.Errorf("%w: it names no subject", ErrIDToken)
	}
	var claims map[string]any
	if err := idt.Claims(&claims); err != nil {
		return Person{}, fmt.Errorf("%w: %w", ErrIDToken, err)
	}
	person := Person{Issuer: p.cfg.Issuer, Subject: idt.Subject, Groups: claimValues(claims, p.cfg.RolesClaim)}
	if email, ok := claims["email"].(string); ok && emailVerified(claims["email_verified"]) {
		person.Email = strings.TrimSpace(email)
	}
	person.Ops, person.Finance = p.cfg.Roles.Of(person.Groups)
	return person, nil
}

// emailVerified: a token that says its email is unverified does not name
// the person by it; one that says nothing (Entra ID's) does, its provider
// being the company's own directory.
func emailVerified(v any) bool {
	switch v := v.(type) {
	case bool:
		return v
	case string:
		return v != "false"
	}
	return true
}

// LogoutURL is the provider's end_session_endpoint, asked to send the
// browser back to postLogout afterwards, or "" when the provider publishes
// none or is not discovered yet.
func (p *Provider) LogoutURL(ctx context.Context, postLogout string) string {
	d, err := p.discovered(ctx)
	if err != nil || d.endSession == "" {
		return ""
	}
	u, err := url.Parse(d.endSession)
	if err != nil {
		return ""
	}
	q := u.Query()
	q.Set("client_id", p.cfg.ClientID)
	if postLogout != "" {
		q.Set("post_logout_redirect_uri", postLogout)
	}
	u.RawQuery = q.Encode()
	return u.String()
}
