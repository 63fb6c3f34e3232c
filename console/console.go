// Package console serves the ops and finance web console under /console/:
// server-rendered pages over paygate's own /v1 API.
//
// It is a thin client of that API, called in-process as the signed-in
// operator (with their role token, or as the person the company's identity
// provider signed in: api.WithPerson), so every rule the API enforces
// (roles, the Idempotency-Key contract, validation, the audit log's actor,
// the limit on failed authentications) holds for the console too. The one
// table it owns is its sessions' (console_sessions); it must never reach
// any other storage itself, nor keep a second copy of any rule the API
// owns. Sign-in with the identity provider is the signin package's.
package console

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"

	"github.com/paygate/paygate/api"
	"github.com/paygate/paygate/signin"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Config configures the console.
type Config struct {
	// API serves /v1 (what api.NewEcho returns); the console sends it every
	// read and every action.
	API http.Handler
	// Pool holds the sessions (console_sessions), shared by every
	// instance.
	Pool *pgxpool.Pool
	// Tokens finds the configured role token whose SHA-256 a session
	// keeps (api.Server.TokenOf); a token it no longer finds ends the
	// session. Not needed with DisableTokens.
	Tokens func(hash [32]byte) (string, bool)
	Logger *slog.Logger
	// SessionTTL bounds a session's life from sign-in
	// (PAYGATE_SESSION_MAX_AGE); default 12 hours.
	SessionTTL time.Duration
	// SignIn, when set, signs people in with the company's OpenID Connect
	// provider; its redirect URL is PublicURL + /console/oidc/callback.
	SignIn *signin.Provider
	// PublicURL is where browsers reach paygate (PAYGATE_PUBLIC_URL): the
	// provider sends them back under it, and its scheme says whether the
	// sign-in's cookie is Secure.
	PublicURL string
	// DisableTokens turns sign-in with a role token off
	// (PAYGATE_CONSOLE_TOKENS=false), and ends token sessions.
	DisableTokens bool
	// AccessContact is whom a person without a role is told to ask
	// (PAYGATE_OPS_EMAIL); "" names the identity provider's
	// administrators.
	AccessContact string
}

// Console is the web console.
type Console struct {
	cfg   Config
	pages map[string]*template.Template
	mu    sync.Mutex
	// secrets wait for their one showing (see shownSecret), by session id
	// hash. They stay in this instance's memory, never in a table.
	secrets map[string]*shownSecret
}

// ErrNoAPI is New's answer to a Config without an API; ErrNoSessions to one
// without Pool, or without Tokens while token sign-in is on; ErrNoSignIn to
// one with token sign-in off and no identity provider.
var (
	ErrNoAPI      = errors.New("console: Config.API is required")
	ErrNoSessions = errors.New("console: Config.Pool and Config.Tokens are required (sessions)")
	ErrNoSignIn   = errors.New("console: token sign-in is off and no identity provider is configured: nobody could sign in")
)

const (
	cookieName = "paygate_console"
	basePath   = "/console"
	maxForm    = 64 << 10
	// apiTimeout bounds one page's or action's calls to the API; the API's
	// own request timeout is shorter, so this only catches a stuck handler.
	apiTimeout = 30 * time.Second
)

type message struct {
	Kind string // ok, error, info
	Text string
}

// New builds the console. It fails with ErrNoAPI without an API,
// ErrNoSessions without Pool or Tokens, ErrNoSignIn when nobody could sign
// in, or when its templates do not parse.
func New(cfg Config) (*Console, error) {
	if cfg.API == nil {
		return nil, ErrNoAPI
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Pool == nil || (cfg.Tokens == nil && !cfg.DisableTokens) {
		return nil, ErrNoSessions
	}
	if cfg.DisableTokens && cfg.SignIn == nil {
		return nil, ErrNoSignIn
	}
	if cfg.SessionTTL <= 0 {
		cfg.SessionTTL = 12 * time.Hour
	}
	pages, err := parseTemplates()
	if err != nil {
		return nil, err
	}
	return &Console{cfg: cfg, pages: pages, secrets: map[string]*shownSecret{}}, nil
}

func parseTemplates() (map[string]*template.Template, error) {
	names, err := fs.Glob(templateFS, "templates/*.html")
	if err != nil {
		return nil, fmt.Errorf("console: templates: %w", err)
	}
	pages := map[string]*template.Template{}
	for _, n := range names {
		if n == "templates/layout.html" {
			continue
		}
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", n)
		if err != nil {
			return nil, fmt.Errorf("console: parse %s: %w", n, err)
		}
		pages[strings.TrimSuffix(strings.TrimPrefix(n, "templates/"), ".html")] = t
	}
	return pages, nil
}

// Register mounts the console under /console/ on e.
func (c *Console) Register(e *echo.Echo) {
	g := e.Group(basePath, c.secureHeaders, c.sameOrigin)
	static, _ := fs.Sub(staticFS, "static")
	g.GET("/static/*", echo.WrapHandler(http.StripPrefix(basePath+"/static/", http.FileServer(http.FS(static)))))
	e.GET(basePath, func(ec echo.Context) error { return ec.Redirect(http.StatusSeeOther, basePath+"/") })
	g.GET("/", c.home)
	g.GET("/signin", c.signinPage)
	g.POST("/signin", c.signin)
	g.POST("/signout", c.signout, c.auth(anyRole), c.csrf)
	g.GET("/oidc/login", c.oidcLogin)
	g.GET("/oidc/callback", c.oidcCallback)

	g.GET("/poison", c.poison, c.auth(opsRole))
	g.POST("/poison/replay", c.bulkReplay, c.auth(opsRole), c.csrf)
	g.GET("/events", c.eventSearch, c.auth(opsRole))
	g.POST("/events/:provider/:event_id/replay", c.replay, c.auth(opsRole), c.csrf)
	g.POST("/events/:provider/:event_id/discard", c.discard, c.auth(opsRole), c.csrf)
	g.POST("/payments/:id/refunds", c.refund, c.auth(opsRole), c.csrf)
	g.GET("/audit", c.audit, c.auth(opsRole))
	g.GET("/endpoints", c.endpoints, c.auth(opsRole))
	g.POST("/endpoints", c.createEndpoint, c.auth(opsRole), c.csrf)
	g.GET("/endpoints/:id", c.endpoint, c.auth(opsRole))
	g.POST("/endpoints/:id", c.updateEndpoint, c.auth(opsRole), c.csrf)
	g.POST("/endpoints/:id/status", c.setEndpointStatus, c.auth(opsRole), c.csrf)
	g.POST("/endpoints/:id/secret", c.revealSecret, c.auth(opsRole), c.csrf)
	g.POST("/endpoints/:id/secret/rotate", c.rotateSecret, c.auth(opsRole), c.csrf)
	g.POST("/endpoints/:id/delete", c.deleteEndpoint, c.auth(opsRole), c.csrf)
	g.POST("/endpoints/:id/recover", c.recoverEndpoint, c.auth(opsRole), c.csrf)
	g.GET("/endpoints/:id/deliveries/:message_id", c.delivery, c.auth(opsRole))
	g.POST("/endpoints/:id/deliveries/:message_id/resend", c.resend, c.auth(opsRole), c.csrf)

	// The reading pages are open to any role: the API decides what each
	// role reads there, and the page says so when it refuses.
	g.GET("/reconciliation", c.reconciliation, c.auth(anyRole))
	g.POST("/reconciliation/runs", c.startRun, c.auth(financeRole), c.csrf)
	g.GET("/reconciliation/runs/:id", c.run, c.auth(anyRole))
	g.GET("/reconciliation/runs/:id/items.csv", c.runCSV, c.auth(anyRole))
	g.GET("/reconciliation/items/:id", c.item, c.auth(anyRole))
	g.POST("/reconciliation/items/:id/resolve", c.resolveItem, c.auth(financeRole), c.csrf)
	g.GET("/books", c.books, c.auth(anyRole))
	g.GET("/books/periods/:period/close", c.confirmClose, c.auth(financeRole))
	g.POST("/books/periods/:period/close", c.closePeriod, c.auth(financeRole), c.csrf)
	g.GET("/books/periods/:period/journal.csv", c.periodJournal, c.auth(financeRole))
	g.GET("/books/journal.csv", c.journal, c.auth(financeRole))
	// Finance reads payments and their events as the API shows them; the
	// actions on those pages are ops', and shown to ops only.
	g.GET("/payments", c.payment, c.auth(anyRole))
	// Both roles read the double charges; refunding and dismissing them
	// is ops'.
	g.GET("/double-charges", c.doubleCharges, c.auth(anyRole))
	g.POST("/double-charges/dismiss", c.dismissDoubleCharge, c.auth(opsRole), c.csrf)
	g.GET("/events/:provider/:event_id", c.event, c.auth(anyRole))
}

// secureHeaders keeps the console's pages out of caches, frames and other
// origins' reach; no page needs a script or anything from elsewhere.
func (c *Console) secureHeaders(next echo.HandlerFunc) echo.HandlerFunc {
	return func(ec echo.Context) error {
		h := ec.Response().Header()
		h.Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Frame-Options", "DENY")
		h.Set(echo.HeaderCacheControl, "no-store")
		return next(ec)
	}
}

// sameOrigin refuses a POST that a browser says came from another site,
// sign-in included (which has no session, so no CSRF token, yet).
func (c *Console) sameOrigin(next echo.HandlerFunc) echo.HandlerFunc {
	return func(ec echo.Context) error {
		if ec.Request().Method == http.MethodPost {
			if site := ec.Request().Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" && site != "none" {
				return c.refuse(ec, http.StatusForbidden, "This form was sent from another site.")
			}
		}
		return next(ec)
	}
}

// roleCheck decides whether a session may open a page. The roles are what
// the API answered at sign-in, not a copy of its rules: a page shows only
// where the API would answer.
type roleCheck func(*session) bool

func anyRole(s *session) bool     { return s.ops || s.finance }
func opsRole(s *session) bool     { return s.ops }
func financeRole(s *session) bool { return s.finance }

const sessionKey = "console.session"

func (c *Console) auth(allowed roleCheck) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(ec echo.Context) error {
			s, err := c.sessionOf(ec)
			if err != nil && !errors.Is(err, errNoSession) {
				c.cfg.Logger.Error("console: read session", "error", err.Error(),
					"request_id", ec.Response().Header().Get(echo.HeaderXRequestID))
				return c.refuse(ec, http.StatusServiceUnavailable, "The console cannot read its sessions right now: try again shortly.")
			}
			if s == nil {
				if ec.Request().Method == http.MethodGet {
					return ec.Redirect(http.StatusSeeOther, basePath+"/signin")
				}
				return c.refuse(ec, http.StatusUnauthorized, "Your session has ended: sign in again.")
			}
			ec.Set(sessionKey, s)
			if !allowed(s) {
				return c.refuse(ec, http.StatusForbidden, "This page is not available to your role.")
			}
			return next(ec)
		}
	}
}

func sessionIn(ec echo.Context) *session {
	s, _ := ec.Get(sessionKey).(*session)
	return s
}

func randomID(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	return base64.RawURLEncoding.EncodeToString(b)
}

func (c *Console) csrf(next echo.HandlerFunc) echo.HandlerFunc {
	return func(ec echo.Context) error {
		ec.Request().Body = http.MaxBytesReader(ec.Response(), ec.Request().Body, maxForm)
		want := c.csrfToken(ec)
		got := ec.FormValue("csrf")
		if want == "" || subtle.ConstantTimeCompare([]byte(want), []byte(got)) != 1 {
			return c.refuse(ec, http.StatusForbidden, "This form has expired or did not come from the console: reload the page and try again.")
		}
		return next(ec)
	}
}

// actionContext is the context of a call that changes state: once the
// operator's click reached us, the action completes even if the browser
// navigates away (a second click cancels the first request), so that the
// API's idempotency record, not the timing of a click, decides the outcome.
func actionContext(ec echo.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(withRequestID(ec, context.WithoutCancel(ec.Request().Context())), apiTimeout)
}

func readContext(ec echo.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(withRequestID(ec, ec.Request().Context()), apiTimeout)
}

type requestIDKey struct{}

type peerKey struct{}

// peer is where a page's request came from, as the API must see it.
type peer struct {
	remoteAddr string
	forwarded  []string // X-Forwarded-For
}

// withRequestID carries the page's request id to its API calls, which the
// API's request-id middleware then reuses: one id ties a page to its calls
// in the log. It carries the page's peer too (its connection's address and
// X-Forwarded-For), so that the API finds the browser's address for its
// limit on failed authentications exactly as for a direct request, trusted
// proxies and all: a wrong token at sign-in counts against the browser's
// address, not the console's.
//
// A person's session calls the API as that person (api.WithPerson): the
// calls carry no token, and the API names the person as their caller.
func withRequestID(ec echo.Context, ctx context.Context) context.Context {
	r := ec.Request()
	ctx = context.WithValue(ctx, peerKey{}, peer{remoteAddr: r.RemoteAddr, forwarded: r.Header.Values(echo.HeaderXForwardedFor)})
	if s := sessionIn(ec); s != nil && s.person {
		ctx = api.WithPerson(ctx, api.Person{Name: s.name, Issuer: s.issuer, Subject: s.subject, Ops: s.ops, Finance: s.finance})
	}
	if id := ec.Response().Header().Get(echo.HeaderXRequestID); id != "" {
		return context.WithValue(ctx, requestIDKey{}, id)
	}
	return ctx
}

// Ops reports whether the session may use the ops pages.
func (s *session) Ops() bool { return s.ops }

// Finance reports whether the session may start reconciliation runs.
func (s *session) Finance() bool { return s.finance }

// Roles names the session's roles for the header.
func (s *session) Roles() string {
	switch {
	case s.ops && s.finance:
		return "ops, finance"
	case s.ops:
		return "ops"
	default:
		return "finance"
	}
}
