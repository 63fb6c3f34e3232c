package api

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"

	"github.com/labstack/echo/v4"
)

// Role is what a bearer token may do.
type Role string

const (
	RoleOps     Role = "ops"
	RoleFinance Role = "finance"
	// RoleConsumer reads the feed of messages (GET /v1/feed), nothing else:
	// the merchant's services that pull what happened.
	RoleConsumer Role = "consumer"
)

// Caller is the authenticated client of a request.
type Caller struct {
	// Identity names the caller without revealing the token: the name of
	// a name:token entry, else "token:" and a hash prefix. It is what the
	// audit log records and what Idempotency-Key scopes keys to.
	Identity string
	Roles    map[Role]bool
	// scope, when set, is what Idempotency-Key scopes keys to instead of
	// Identity: a person's, which no token's identity can equal.
	scope string
}

// idempotencyScope is whose keys a request's Idempotency-Key is among.
func (c Caller) idempotencyScope() string {
	if c.scope != "" {
		return c.scope
	}
	return c.Identity
}

// Person is someone the console signed in through the company's identity
// provider. The console calls this API in-process on their behalf with
// WithPerson, and the person is then the caller: the audit log, refund
// requests, period closes, resolutions and dismissals name them.
type Person struct {
	// Name is what the audit log records: their email, else their
	// subject at the provider.
	Name string
	// Issuer and Subject identify them at their provider; their
	// Idempotency-Keys are theirs alone.
	Issuer, Subject string
	Ops, Finance    bool
}

type personKey struct{}

// WithPerson returns a context whose API requests are made by p: the
// console's in-process calls for a person's session, which carry no token.
//
// A context value cannot come from the network (no header, cookie or body
// sets one): only code in this process that calls WithPerson, and that
// already holds everything the API guards, can make a request a person's.
// A request that carries a person and an Authorization header as well is
// refused, so that no caller is two at once.
func WithPerson(ctx context.Context, p Person) context.Context {
	return context.WithValue(ctx, personKey{}, p)
}

// PersonOf returns the person ctx's requests are made by (WithPerson), if
// any.
func PersonOf(ctx context.Context) (Person, bool) {
	p, ok := ctx.Value(personKey{}).(Person)
	return p, ok
}

// personCaller is the caller of a request made with WithPerson, if any: a
// person with a name and a subject, and only the console's roles.
func personCaller(ctx context.Context) (Caller, bool) {
	p, ok := ctx.Value(personKey{}).(Person)
	if !ok || strings.TrimSpace(p.Name) == "" || p.Subject == "" || p.Issuer == "" {
		return Caller{}, false
	}
	c := Caller{Identity: p.Name, Roles: map[Role]bool{}, scope: "person:" + p.Issuer + " " + p.Subject}
	if p.Ops {
		c.Roles[RoleOps] = true
	}
	if p.Finance {
		c.Roles[RoleFinance] = true
	}
	return c, len(c.Roles) > 0
}

type credential struct {
	hash     [32]byte
	token    string
	role     Role
	identity string
}

type authenticator struct{ creds []credential }

// ErrTokenConfig is returned by CheckTokens for a role token list that
// cannot name its callers unambiguously.
var ErrTokenConfig = errors.New("invalid role tokens")

// operatorName is what a name:token entry's name may be: it is stored as
// the actor of the audit log and never holds a colon, so no name can pass
// for a bare token's "token:…" identity.
var operatorName = regexp.MustCompile(`^[a-z0-9._-]+$`)

// CheckTokens reports whether ops and finance (PAYGATE_OPS_TOKENS,
// PAYGATE_FINANCE_TOKENS entries), and consumer, if given
// (PAYGATE_CONSUMER_TOKENS), are valid: each a bare token or
// name:token, a name of [a-z0-9._-]+ given once per role and always with
// the same token (an operator with both roles lists it under both), and a
// token under one identity only. It fails with ErrTokenConfig, naming the
// entry but never a token.
func CheckTokens(ops, finance []string, consumer ...[]string) error {
	_, err := parseTokens(ops, finance, slices.Concat(consumer...))
	return err
}

func parseTokens(ops, finance, consumer []string) (*authenticator, error) {
	a := &authenticator{}
	byName := map[string][32]byte{}
	identityOf := map[[32]byte]string{}
	seen := map[string]bool{} // role/name
	var errs []error
	add := func(entries []string, role Role, variable string) {
		for i, entry := range entries {
			entry = strings.TrimSpace(entry)
			if entry == "" {
				continue
			}
			name, token, named := strings.Cut(entry, ":")
			if !named {
				token = entry
			}
			token = strings.TrimSpace(token)
			where := fmt.Sprintf("%s entry %d", variable, i+1)
			if named {
				where = fmt.Sprintf("%s entry %d (%s)", variable, i+1, name)
				if !operatorName.MatchString(name) {
					errs = append(errs, fmt.Errorf("%w: %s: a name is [a-z0-9._-]+ before the colon", ErrTokenConfig, where))
					continue
				}
				if token == "" {
					errs = append(errs, fmt.Errorf("%w: %s: no token after the colon", ErrTokenConfig, where))
					continue
				}
			}
			h := sha256.Sum256([]byte(token))
			identity := "token:" + hex.EncodeToString(h[:6])
			if named {
				identity = name
				if seen[string(role)+"/"+name] {
					errs = append(errs, fmt.Errorf("%w: %s: the name %q is given twice", ErrTokenConfig, where, name))
					continue
				}
				seen[string(role)+"/"+name] = true
				if prev, ok := byName[name]; ok && prev != h {
					errs = append(errs, fmt.Errorf("%w: %s: the name %q is given with two different tokens", ErrTokenConfig, where, name))
					continue
				}
				byName[name] = h
			}
			if prev, ok := identityOf[h]; ok && prev != identity {
				errs = append(errs, fmt.Errorf("%w: %s: its token is also given as %s", ErrTokenConfig, where, prev))
				continue
			}
			identityOf[h] = identity
			a.creds = append(a.creds, credential{hash: h, token: token, role: role, identity: identity})
		}
	}
	add(ops, RoleOps, "PAYGATE_OPS_TOKENS")
	add(finance, RoleFinance, "PAYGATE_FINANCE_TOKENS")
	add(consumer, RoleConsumer, "PAYGATE_CONSUMER_TOKENS")
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return a, nil
}

// newAuthenticator builds the authenticator of ops and finance. Tokens that
// CheckTokens refuses admit nobody: serve checks them before it starts, and
// an API that guessed who is who would write the guess into the audit log.
func newAuthenticator(ops, finance, consumer []string) (*authenticator, error) {
	a, err := parseTokens(ops, finance, consumer)
	if err != nil {
		return &authenticator{}, err
	}
	return a, nil
}

const callerKey = "paygate.caller"

// identify finds the caller of a bearer token. Tokens are compared as
// hashes in constant time, all of them, so timing reveals nothing. The
// identity is the entry's name, or for a bare token its role-free hash
// prefix as it has always been.
func (a *authenticator) identify(token string) (Caller, bool) {
	if token == "" {
		return Caller{}, false
	}
	h := sha256.Sum256([]byte(token))
	c := Caller{Roles: map[Role]bool{}}
	for _, cred := range a.creds {
		if subtle.ConstantTimeCompare(h[:], cred.hash[:]) == 1 {
			c.Roles[cred.role] = true
			c.Identity = cred.identity
		}
	}
	if len(c.Roles) == 0 {
		return Caller{}, false
	}
	return c, true
}

// authenticate admits a request with a known bearer token. An address
// that failed too often is refused first (429, Retry-After), whatever its
// token; a request that brings a token and fails is counted against its
// address (never logged with the token). A request with no Authorization
// header at all is refused without being counted: it guessed nothing.
func (s *Server) authenticate(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		ctx := c.Request().Context()
		if ctx.Value(personKey{}) != nil {
			// A person's request, from the console in-process: the
			// provider authenticated them, nothing here can be guessed,
			// and the limit on failed tokens is not theirs to meet.
			caller, ok := personCaller(ctx)
			if !ok || c.Request().Header.Get(echo.HeaderAuthorization) != "" {
				return ErrUnauthorized
			}
			c.Set(callerKey, caller)
			return next(c)
		}
		addr := addrKey(c.RealIP())
		if left := s.limiter.refusedFor(ctx, addr); left > 0 {
			return s.limiter.refuse(c, left)
		}
		auth := c.Request().Header.Get(echo.HeaderAuthorization)
		scheme, token, ok := strings.Cut(auth, " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") {
			c.Response().Header().Set(echo.HeaderWWWAuthenticate, `Bearer realm="paygate"`)
			if auth != "" {
				s.limiter.fail(ctx, addr, "malformed", c)
			}
			return ErrUnauthorized
		}
		caller, ok := s.auth.identify(strings.TrimSpace(token))
		if !ok {
			c.Response().Header().Set(echo.HeaderWWWAuthenticate, `Bearer realm="paygate", error="invalid_token"`)
			s.limiter.fail(ctx, addr, "unknown_token", c)
			return ErrUnauthorized
		}
		c.Set(callerKey, caller)
		return next(c)
	}
}

// TokenOf returns the configured role token (ops or finance) whose SHA-256
// is hash, so that the console can keep a session's hash of its token and
// never the token: a token taken out of the configuration is no longer
// found, and its sessions end.
func (s *Server) TokenOf(hash [32]byte) (string, bool) {
	for _, cred := range s.auth.creds {
		if cred.role != RoleConsumer && subtle.ConstantTimeCompare(hash[:], cred.hash[:]) == 1 {
			return cred.token, true
		}
	}
	return "", false
}

// requireRole lets a request through when its caller has any of roles.
func requireRole(roles ...Role) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			caller := callerOf(c)
			for _, r := range roles {
				if caller.Roles[r] {
					return next(c)
				}
			}
			return ErrForbidden
		}
	}
}

func callerOf(c echo.Context) Caller {
	caller, _ := c.Get(callerKey).(Caller)
	return caller
}

// MeView is who a token is: the identity the audit log names, and its
// roles.
type MeView struct {
	Identity string `json:"identity"`
	Roles    []Role `json:"roles"`
}

// me answers GET /v1/me, so that a client (the console's sign-in) learns a
// token's roles from the API itself.
func (s *Server) me(c echo.Context) error {
	caller := callerOf(c)
	v := MeView{Identity: caller.Identity, Roles: []Role{}}
	for _, r := range []Role{RoleOps, RoleFinance, RoleConsumer} {
		if caller.Roles[r] {
			v.Roles = append(v.Roles, r)
		}
	}
	return writeJSON(c, http.StatusOK, v)
}
