package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
)

// Defaults of Config.AuthFailureLimit and Config.AuthFailureWindow: past 10
// failed authentications in a minute an address is refused until the minute
// has passed.
const (
	DefaultAuthFailureLimit  = 10
	DefaultAuthFailureWindow = time.Minute
)

// ErrTooManyFailures answers every /v1 request from an address that failed
// to authenticate too often; Retry-After says when it may try again.
var ErrTooManyFailures = errors.New("too many failed authentications from this address; retry after the time in Retry-After")

// limitCacheTTL is how long an instance trusts its last look at an
// address's standing before it reads the shared table again: a successful
// caller costs one indexed read per address per second at most, and a
// limit reached on another instance applies here within a second.
const limitCacheTTL = time.Second

// authLimiter counts failed authentications per client address in
// PostgreSQL (auth_failures), so that every instance shares the count and
// a restart does not reset it. Only failures write; a request reads an
// address's standing at most once per limitCacheTTL.
type authLimiter struct {
	pool   *pgxpool.Pool
	limit  int
	window time.Duration
	logger *slog.Logger

	failures *prometheus.CounterVec
	limited  prometheus.Counter

	mu        sync.Mutex
	standing  map[string]standing // by address key
	lastPurge time.Time
}

type standing struct {
	until   time.Time // refused until then; zero: not refused
	checked time.Time
}

func newAuthLimiter(cfg Config) *authLimiter {
	l := &authLimiter{
		pool: cfg.Pool, limit: cfg.AuthFailureLimit, window: cfg.AuthFailureWindow, logger: cfg.Logger,
		standing: map[string]standing{},
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "paygate_auth_failures_total",
			Help: "Failed authentications (a wrong or malformed bearer token on /v1, console sign-in included), by what was wrong.",
		}, []string{"reason"}),
		limited: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "paygate_auth_limited_total",
			Help: "Requests refused with 429 because their address failed to authenticate too often.",
		}),
	}
	if l.limit <= 0 {
		l.limit = DefaultAuthFailureLimit
	}
	if l.window <= 0 {
		l.window = DefaultAuthFailureWindow
	}
	cfg.Registry.MustRegister(l.failures, l.limited)
	return l
}

// addrKey is what failures are counted under: an IPv4 address, or an IPv6
// address's /64 (one host usually holds a whole /64, and could otherwise
// try from each of its addresses).
func addrKey(ip string) string {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return ip
	}
	a = a.Unmap()
	if a.Is4() {
		return a.String()
	}
	p, _ := a.Prefix(64)
	return p.String()
}

// retryAfter answers the seconds left, rounded up, never under 1.
func retryAfter(d time.Duration) string {
	return strconv.Itoa(max(1, int(math.Ceil(d.Seconds()))))
}

// refusedFor reports how long key is still refused (0: not refused). A
// database that cannot be read lets the request through: the limiter must
// not turn an outage into a refusal of every caller, and the request's own
// queries will answer 503 anyway.
func (l *authLimiter) refusedFor(ctx context.Context, key string) time.Duration {
	if l.pool == nil {
		return 0
	}
	now := time.Now()
	l.mu.Lock()
	st, ok := l.standing[key]
	l.mu.Unlock()
	if !ok || now.Sub(st.checked) >= limitCacheTTL {
		var left float64
		err := l.pool.QueryRow(ctx, `SELECT extract(epoch FROM window_start + $3 - now())::float8 FROM auth_failures
			WHERE addr = $1 AND failures >= $2 AND window_start + $3 > now()`, key, l.limit, l.window).Scan(&left)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			st = standing{checked: now}
		case err != nil:
			l.logger.Warn("auth limiter: read failed; not limiting", "error", err.Error())
			return 0
		default:
			st = standing{until: now.Add(time.Duration(left * float64(time.Second))), checked: now}
		}
		l.remember(key, st)
	}
	return max(0, st.until.Sub(now))
}

func (l *authLimiter) remember(key string, st standing) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.standing) >= 100_000 {
		// Many addresses: forget the stale ones rather than grow.
		for k, v := range l.standing {
			if time.Since(v.checked) >= limitCacheTTL && time.Now().After(v.until) {
				delete(l.standing, k)
			}
		}
	}
	l.standing[key] = st
}

// fail counts a failed authentication of key, in a window that starts at
// the address's first failure and lasts l.window; it answers how long key
// is now refused (0: not yet).
func (l *authLimiter) fail(ctx context.Context, key, reason string, c echo.Context) time.Duration {
	l.failures.WithLabelValues(reason).Inc()
	if l.pool == nil {
		return 0
	}
	// The count must not depend on the request's own deadline or a client
	// that went away: a guesser would cancel to avoid being counted.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	var failures int
	var left float64
	err := l.pool.QueryRow(ctx, `INSERT INTO auth_failures AS f (addr, window_start, failures) VALUES ($1, now(), 1)
		ON CONFLICT (addr) DO UPDATE SET
			failures = CASE WHEN f.window_start + $2 <= now() THEN 1 ELSE f.failures + 1 END,
			window_start = CASE WHEN f.window_start + $2 <= now() THEN now() ELSE f.window_start END
		RETURNING failures, extract(epoch FROM window_start + $2 - now())::float8`, key, l.window).Scan(&failures, &left)
	requestID := c.Response().Header().Get(echo.HeaderXRequestID)
	if err != nil {
		l.logger.Warn("auth limiter: count failed", "addr", key, "error", err.Error(), "request_id", requestID)
		return 0
	}
	now := time.Now()
	st := standing{checked: now}
	if failures >= l.limit {
		st.until = now.Add(time.Duration(left * float64(time.Second)))
	}
	l.remember(key, st)
	l.logger.Info("authentication failed", "addr", key, "reason", reason, "failures", failures,
		"route", c.Path(), "request_id", requestID)
	if failures == l.limit {
		l.logger.Warn("authentication failures limited", "addr", key, "failures", failures,
			"retry_after_s", retryAfter(st.until.Sub(now)), "request_id", requestID)
	}
	l.purge(ctx, now)
	return max(0, st.until.Sub(now))
}

// purge deletes windows long over, at most once a minute per instance and
// only on the failure path.
func (l *authLimiter) purge(ctx context.Context, now time.Time) {
	l.mu.Lock()
	due := now.Sub(l.lastPurge) >= time.Minute
	if due {
		l.lastPurge = now
	}
	l.mu.Unlock()
	if !due {
		return
	}
	if _, err := l.pool.Exec(ctx, `DELETE FROM auth_failures WHERE window_start + $1 < now()`, l.window); err != nil {
		l.logger.Warn("auth limiter: purge failed", "error", err.Error())
	}
}

// refuse answers ErrTooManyFailures with Retry-After.
func (l *authLimiter) refuse(c echo.Context, left time.Duration) error {
	l.limited.Inc()
	c.Response().Header().Set("Retry-After", retryAfter(left))
	return ErrTooManyFailures
}

// ipExtractor finds a request's client address: the connection's peer,
// unless that peer is a trusted proxy; then the rightmost X-Forwarded-For
// entry that is not a trusted proxy (what each proxy appended is trusted
// only as far as the proxies are). Nothing is trusted by default, loopback
// and private networks included.
func ipExtractor(trusted []netip.Prefix) echo.IPExtractor {
	opts := []echo.TrustOption{echo.TrustLoopback(false), echo.TrustLinkLocal(false), echo.TrustPrivateNet(false)}
	for _, p := range trusted {
		opts = append(opts, echo.TrustIPRange(&net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}))
	}
	return echo.ExtractIPFromXFFHeader(opts...)
}

// ParseTrustedProxies reads PAYGATE_TRUSTED_PROXIES' entries: CIDRs or
// single addresses. It fails naming the entry it cannot read.
func ParseTrustedProxies(entries []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, e := range entries {
		if p, err := netip.ParsePrefix(e); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(e)
		if err != nil {
			return nil, fmt.Errorf("trusted proxy %q is neither an address nor a CIDR", e)
		}
		out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
	}
	return out, nil
}
