package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paygate/paygate/console"
	"github.com/paygate/paygate/signin"
)

// signinConfig is how people sign in to the console: with the company's
// OpenID Connect provider when its issuer and client are set, and with a
// role token unless PAYGATE_CONSOLE_TOKENS is false.
type signinConfig struct {
	PublicURL    string // PAYGATE_PUBLIC_URL, without a trailing slash
	Issuer       string
	ClientID     string
	ClientSecret string
	RolesClaim   string
	Roles        signin.Roles
	Scopes       []string
	// SessionMaxAge bounds every console session (PAYGATE_SESSION_MAX_AGE).
	SessionMaxAge time.Duration
	// NoTokens: PAYGATE_CONSOLE_TOKENS=false.
	NoTokens bool
}

// defaultSessionMaxAge is PAYGATE_SESSION_MAX_AGE's default.
const defaultSessionMaxAge = 12 * time.Hour

func (s signinConfig) oidc() bool { return s.Issuer != "" }

func loadSignin(getenv func(string) string) (signinConfig, error) {
	s := signinConfig{
		Issuer:       strings.TrimSpace(getenv("PAYGATE_OIDC_ISSUER")),
		ClientID:     strings.TrimSpace(getenv("PAYGATE_OIDC_CLIENT_ID")),
		ClientSecret: getenv("PAYGATE_OIDC_CLIENT_SECRET"),
		RolesClaim:   or(strings.TrimSpace(getenv("PAYGATE_OIDC_ROLES_CLAIM")), signin.DefaultRolesClaim),
		Scopes: strings.FieldsFunc(or(getenv("PAYGATE_OIDC_SCOPES"), defaultOIDCScopes), func(r rune) bool {
			return r == ',' || r == ' '
		}),
		SessionMaxAge: defaultSessionMaxAge,
	}
	if set := countSet(s.Issuer, s.ClientID, s.ClientSecret); set != 0 && set != 3 {
		return s, fmt.Errorf("PAYGATE_OIDC_ISSUER, PAYGATE_OIDC_CLIENT_ID and PAYGATE_OIDC_CLIENT_SECRET are set together or not at all")
	}
	var err error
	if s.Roles, err = signin.ParseRoles(getenv("PAYGATE_OIDC_ROLES")); err != nil {
		return s, fmt.Errorf("PAYGATE_OIDC_ROLES: %w (entries such as ops=paygate-ops,finance=paygate-finance)", err)
	}
	if s.oidc() {
		if u, err := url.Parse(s.Issuer); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			return s, fmt.Errorf("PAYGATE_OIDC_ISSUER must be the provider's issuer URL, such as https://accounts.google.com, got %q", s.Issuer)
		}
	}
	if v := strings.TrimSpace(getenv("PAYGATE_PUBLIC_URL")); v != "" {
		u, err := url.Parse(v)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || strings.Trim(u.Path, "/") != "" ||
			u.RawQuery != "" || u.Fragment != "" || u.User != nil {
			return s, fmt.Errorf("PAYGATE_PUBLIC_URL must be the scheme and host browsers reach paygate at, such as https://paygate.example.com, got %q", v)
		}
		s.PublicURL = u.Scheme + "://" + u.Host
	} else if s.oidc() {
		return s, fmt.Errorf("PAYGATE_PUBLIC_URL is required with PAYGATE_OIDC_ISSUER: the provider sends people back to <PAYGATE_PUBLIC_URL>/console/oidc/callback")
	}
	switch v := strings.ToLower(strings.TrimSpace(getenv("PAYGATE_CONSOLE_TOKENS"))); v {
	case "", "true":
	case "false":
		if !s.oidc() {
			return s, fmt.Errorf("PAYGATE_CONSOLE_TOKENS=false needs PAYGATE_OIDC_ISSUER: nobody could sign in to the console")
		}
		s.NoTokens = true
	default:
		return s, fmt.Errorf("PAYGATE_CONSOLE_TOKENS must be true or false, got %q", v)
	}
	if v := getenv("PAYGATE_SESSION_MAX_AGE"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < time.Minute || d > 30*24*time.Hour {
			return s, fmt.Errorf("PAYGATE_SESSION_MAX_AGE must be a duration from 1m to 720h, such as 12h, got %q", v)
		}
		s.SessionMaxAge = d
	}
	return s, nil
}

func countSet(values ...string) int {
	n := 0
	for _, v := range values {
		if v != "" {
			n++
		}
	}
	return n
}

// newConsole builds the console with its sign-in. The provider is
// discovered in the background: one that is down at start is retried at
// the next sign-in, and the token form (when on) serves meanwhile.
func newConsole(ctx context.Context, cfg config, api http.Handler, pool *pgxpool.Pool,
	tokens func([32]byte) (string, bool), logger *slog.Logger) (*console.Console, error) {
	s := cfg.Signin
	cc := console.Config{API: api, Pool: pool, Tokens: tokens, Logger: logger, SessionTTL: s.SessionMaxAge,
		PublicURL: s.PublicURL, DisableTokens: s.NoTokens, AccessContact: cfg.OpsEmail}
	if s.oidc() {
		p, err := signin.New(signin.Config{
			Issuer: s.Issuer, ClientID: s.ClientID, ClientSecret: s.ClientSecret,
			RedirectURL: s.PublicURL + "/console/oidc/callback", Scopes: s.Scopes,
			RolesClaim: s.RolesClaim, Roles: s.Roles, Pool: pool, Logger: logger,
		})
		if err != nil {
			return nil, err
		}
		if u, _ := url.Parse(s.Issuer); u.Scheme == "http" && !loopback(u.Hostname()) {
			logger.Warn("PAYGATE_OIDC_ISSUER is http: the provider's keys and tokens travel unencrypted (development only)")
		}
		go func() {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
			defer cancel()
			if err := p.Discover(dctx); err != nil {
				logger.Warn("console sign-in: the identity provider could not be discovered; retried at the next sign-in", "error", err.Error())
			}
		}()
		cc.SignIn = p
	}
	return console.New(cc)
}

func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
