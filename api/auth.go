package api

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"strings"

	"github.com/labstack/echo/v4"
)

// Role is what a bearer token may do.
type Role string

const (
	RoleOps     Role = "ops"
	RoleFinance Role = "finance"
)

// Caller is the authenticated client of a request.
type Caller struct {
	// Identity names the token without revealing it (role and a hash
	// prefix): it is what the audit log records and what Idempotency-Key
	// scopes keys to.
	Identity string
	Roles    map[Role]bool
}

type credential struct {
	hash [32]byte
	role Role
}

type authenticator struct{ creds []credential }

func newAuthenticator(ops, finance []string) *authenticator {
	a := &authenticator{}
	add := func(tokens []string, role Role) {
		for _, t := range tokens {
			if t = strings.TrimSpace(t); t != "" {
				a.creds = append(a.creds, credential{hash: sha256.Sum256([]byte(t)), role: role})
			}
		}
	}
	add(ops, RoleOps)
	add(finance, RoleFinance)
	return a
}

const callerKey = "paygate.caller"

// identify finds the caller of a bearer token. Tokens are compared as
// hashes in constant time, all of them, so timing reveals nothing.
func (a *authenticator) identify(token string) (Caller, bool) {
	if token == "" {
		return Caller{}, false
	}
	h := sha256.Sum256([]byte(token))
	c := Caller{Roles: map[Role]bool{}}
	for _, cred := range a.creds {
		if subtle.ConstantTimeCompare(h[:], cred.hash[:]) == 1 {
			c.Roles[cred.role] = true
		}
	}
	if len(c.Roles) == 0 {
		return Caller{}, false
	}
	c.Identity = "token:" + hex.EncodeToString(h[:6])
	return c, true
}

func (a *authenticator) middleware(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		auth := c.Request().Header.Get(echo.HeaderAuthorization)
		scheme, token, ok := strings.Cut(auth, " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") {
			c.Response().Header().Set(echo.HeaderWWWAuthenticate, `Bearer realm="paygate"`)
			return ErrUnauthorized
		}
		caller, ok := a.identify(strings.TrimSpace(token))
		if !ok {
			c.Response().Header().Set(echo.HeaderWWWAuthenticate, `Bearer realm="paygate", error="invalid_token"`)
			return ErrUnauthorized
		}
		c.Set(callerKey, caller)
		return next(c)
	}
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
