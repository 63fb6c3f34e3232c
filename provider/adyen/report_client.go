package adyen

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/paygate/paygate/provider"
)

// DefaultReportHosts are the hosts Adyen serves reports from, test and
// live (PAYGATE_ADYEN_REPORT_HOSTS's default).
var DefaultReportHosts = []string{"ca-test.adyen.com", "ca-live.adyen.com"}

// DefaultMaxReportBytes bounds a report's size: a busy account's batch is
// a few megabytes.
const DefaultMaxReportBytes = 256 << 20

// Errors of the report client. ErrReportRefused and ErrReportTooLarge wrap
// provider.ErrPermanent: no retry can change them.
var (
	// ErrReportRefused: the URL is one the configuration does not let
	// paygate fetch (a host not allowed, plain http to a host not named
	// by address, credentials in it), or its host resolved to a private
	// address. Nothing was fetched.
	ErrReportRefused = fmt.Errorf("report URL refused: %w", provider.ErrPermanent)
	// ErrReportTooLarge: the report is larger than the configured bound.
	ErrReportTooLarge = fmt.Errorf("report too large: %w", provider.ErrPermanent)
)

// ReportClientConfig configures ReportClient.
type ReportClientConfig struct {
	// User and Password are the report user's credentials
	// (PAYGATE_ADYEN_REPORT_USER, PAYGATE_ADYEN_REPORT_PASSWORD), sent with
	// Basic auth.
	User, Password string
	// Hosts are the hosts reports may be fetched from, as "host" (https on
	// its default port) or "host:port"; DefaultReportHosts when empty. A
	// host given as an IP address is named explicitly: it may be reached
	// over plain http, and even when it is a private address.
	Hosts []string
	// PublicAddress is the rule outgoing connections follow: it reports
	// whether an address is on the public internet (delivery's rule). An
	// address it refuses is reached only when Hosts names it by address.
	// Required: without it NewReportClient fails.
	PublicAddress func(netip.Addr) bool
	// MaxBytes bounds a report; DefaultMaxReportBytes when zero.
	MaxBytes int64
	// Timeout bounds one download; two minutes when zero.
	Timeout time.Duration
}

// ReportClient downloads Adyen's reports: the second call paygate makes to
// Adyen. It follows no redirect, reads a bounded body, and connects only
// to the allowed hosts, checking the address it connects to after
// resolution (so a name that changes its answer cannot get around the
// private-address rule).
type ReportClient struct {
	user, password string
	hosts          []reportHost
	named          map[netip.Addr]bool // addresses Hosts names
	public         func(netip.Addr) bool
	max            int64
	client         *http.Client
}

type reportHost struct {
	host string // lowercase; an IP address without brackets
	port string // empty: the scheme's default
	addr bool   // named by address
}

// ParseReportHosts reads PAYGATE_ADYEN_REPORT_HOSTS: comma-separated
// "host" or "host:port" entries ("[::1]:8443" for IPv6 with a port).
func ParseReportHosts(v string) ([]string, error) {
	var out []string
	for _, e := range strings.Split(v, ",") {
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		if _, err := parseReportHost(e); err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

func parseReportHost(e string) (reportHost, error) {
	host, port := e, ""
	if h, p, err := net.SplitHostPort(e); err == nil {
		host, port = h, p
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return reportHost{}, fmt.Errorf("%q: the port is not a number from 1 to 65535", e)
		}
	}
	host = strings.ToLower(strings.Trim(host, "[]"))
	if host == "" || strings.ContainsAny(host, "/@?#:") && !isIP(host) {
		return reportHost{}, fmt.Errorf("%q is not a host or host:port", e)
	}
	return reportHost{host: host, port: port, addr: isIP(host)}, nil
}

func isIP(h string) bool {
	_, err := netip.ParseAddr(h)
	return err == nil
}

// NewReportClient returns a client for cfg. It fails with ErrAPIConfig
// without a user, a password or the address rule, or with a malformed
// host.
func NewReportClient(cfg ReportClientConfig) (*ReportClient, error) {
	if cfg.User == "" || cfg.Password == "" {
		return nil, fmt.Errorf("%w: the report user and its password are required", ErrAPIConfig)
	}
	if cfg.PublicAddress == nil {
		return nil, fmt.Errorf("%w: no rule for outgoing addresses", ErrAPIConfig)
	}
	hosts := cfg.Hosts
	if len(hosts) == 0 {
		hosts = DefaultReportHosts
	}
	c := &ReportClient{user: cfg.User, password: cfg.Password, named: map[netip.Addr]bool{},
		public: cfg.PublicAddress, max: cfg.MaxBytes}
	for _, e := range hosts {
		h, err := parseReportHost(e)
		if err != nil {
			return nil, fmt.Errorf("%w: report hosts: %w", ErrAPIConfig, err)
		}
		c.hosts = append(c.hosts, h)
		if h.addr {
			c.named[netip.MustParseAddr(h.host).Unmap()] = true
		}
	}
	if c.max <= 0 {
		c.max = DefaultMaxReportBytes
	}
	timeout := cfg.Timeout
	if timeout <= 0 {
		timeout = 2 * time.Minute
	}
	dialer := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second, Control: c.control}
	c.client = &http.Client{
		Timeout: timeout,
		Transport: &http.Transport{
			Proxy:                 nil, // a proxy would connect for us, past the address check
			DialContext:           dialer.DialContext,
			TLSHandshakeTimeout:   10 * time.Second,
			ResponseHeaderTimeout: 30 * time.Second,
			MaxIdleConns:          2,
			IdleConnTimeout:       30 * time.Second,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return c, nil
}

// control runs on the address about to be connected to, after resolution:
// a private address is reached only when the hosts name it by address.
func (c *ReportClient) control(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("%w: unreadable address", ErrReportRefused)
	}
	ip := ap.Addr().Unmap()
	if c.named[ip] || c.public(ip) {
		return nil
	}
	return fmt.Errorf("%w: the report host resolved to %s, which is not a public address", ErrReportRefused, ip)
}

// Check reports whether raw may be fetched: an absolute URL without
// credentials on an allowed host, over https unless the host is named by
// address. It fails with an error wrapping ErrReportRefused that names the
// host, never the whole URL.
func (c *ReportClient) Check(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || !u.IsAbs() || u.Hostname() == "" {
		return fmt.Errorf("%w: not an absolute URL", ErrReportRefused)
	}
	if u.User != nil {
		return fmt.Errorf("%w: credentials in the URL", ErrReportRefused)
	}
	if u.Scheme != "https" && u.Scheme != "http" {
		return fmt.Errorf("%w: scheme %q", ErrReportRefused, u.Scheme)
	}
	host, port := strings.ToLower(u.Hostname()), u.Port()
	defaultPort := map[string]string{"https": "443", "http": "80"}[u.Scheme]
	if port == "" {
		port = defaultPort
	}
	for _, h := range c.hosts {
		if h.host != host || port != cmp.Or(h.port, defaultPort) {
			continue
		}
		if u.Scheme != "https" && !h.addr {
			return fmt.Errorf("%w: plain http to %s; use https", ErrReportRefused, host)
		}
		return nil
	}
	return fmt.Errorf("%w: host %s is not in PAYGATE_ADYEN_REPORT_HOSTS", ErrReportRefused, u.Host)
}

// Download fetches the report at raw with the report user's Basic auth.
//
// It fails with an error wrapping ErrReportRefused (see Check; nothing is
// fetched) or ErrReportTooLarge, which no retry changes, and with one
// wrapping provider.ErrAPI for anything else (a status other than 200, a
// redirect, a network failure), which a retry may.
func (c *ReportClient) Download(ctx context.Context, raw string) ([]byte, error) {
	if err := c.Check(raw); err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, raw, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrReportRefused, err)
	}
	req.SetBasicAuth(c.user, c.password)
	req.Header.Set("User-Agent", "paygate")
	res, err := c.client.Do(req)
	if errors.Is(err, ErrReportRefused) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("%w: download report: %w", provider.ErrAPI, err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 4<<10))
		return nil, fmt.Errorf("%w: download report: HTTP %d from %s", provider.ErrAPI, res.StatusCode, req.URL.Host)
	}
	if res.ContentLength > c.max {
		return nil, fmt.Errorf("%w: %d bytes, more than %d", ErrReportTooLarge, res.ContentLength, c.max)
	}
	body, err := io.ReadAll(io.LimitReader(res.Body, c.max+1))
	if err != nil {
		return nil, fmt.Errorf("%w: read report: %w", provider.ErrAPI, err)
	}
	if int64(len(body)) > c.max {
		return nil, fmt.Errorf("%w: more than %d bytes", ErrReportTooLarge, c.max)
	}
	return body, nil
}
