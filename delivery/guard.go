package delivery

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// MaxURLLength bounds an endpoint URL; browsers and most servers stop
// around here, and it keeps the column and the logs sane.
const MaxURLLength = 2048

// resolveTimeout caps CheckURL's lookup when the caller's context has no
// sooner deadline: an API request must not hang on someone's DNS.
const resolveTimeout = 5 * time.Second

var (
	// ErrPrivateAddress is returned (wrapped) when a connection would go
	// to an address that is not on the public internet.
	ErrPrivateAddress = errors.New("connection to private address refused")
	// ErrInvalidURL is returned by CheckURL for a URL that is malformed
	// or that no configuration could accept; the API answers 400.
	ErrInvalidURL = errors.New("invalid endpoint url")
	// ErrForbiddenURL is returned by CheckURL for a well-formed URL this
	// configuration refuses to call (plain http, a private or unresolvable
	// host); the API answers 422.
	ErrForbiddenURL = errors.New("forbidden endpoint url")
)

// GuardConfig says which addresses outgoing connections may reach.
type GuardConfig struct {
	// AllowPrivate lets endpoints use http and private, loopback and
	// link-local addresses. For development and tests only: in production
	// it lets any merchant probe our network and the cloud metadata
	// service.
	AllowPrivate bool
	// Resolver resolves endpoint hosts; nil means net.DefaultResolver.
	Resolver *net.Resolver

	// permit, when set, lets through addresses it returns true for
	// before the rule applies: tests use it to reach one loopback server
	// while every other private address stays refused.
	permit func(netip.AddrPort) bool
}

func (g GuardConfig) resolver() *net.Resolver {
	if g.Resolver != nil {
		return g.Resolver
	}
	return net.DefaultResolver
}

// control is a net.Dialer Control function. It runs after resolution,
// on the very address about to be connected to, so a name that answered
// with a public address when the endpoint was checked and with 10.0.0.1
// now (DNS rebinding) is still refused.
func (g GuardConfig) control(network, address string, _ syscall.RawConn) error {
	if g.AllowPrivate {
		return nil
	}
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		// Fail closed: an address we cannot read is one we cannot vouch for.
		return fmt.Errorf("%w: unparseable address %q: %w", ErrPrivateAddress, address, err)
	}
	if g.permit != nil && g.permit(ap) {
		return nil
	}
	if !allowedIP(ap.Addr()) {
		return fmt.Errorf("%w: %s", ErrPrivateAddress, ap.Addr())
	}
	return nil
}

func (g GuardConfig) dialer(connectTimeout time.Duration) *net.Dialer {
	return &net.Dialer{
		Timeout:   connectTimeout,
		KeepAlive: 30 * time.Second,
		Resolver:  g.Resolver,
		Control:   g.control,
	}
}

// deniedPrefixes are ranges outside the standard library's predicates
// that must not be reachable from a merchant-chosen URL.
var deniedPrefixes = []netip.Prefix{
	// "This network": Linux treats 0.x.x.x as the local host.
	netip.MustParsePrefix("0.0.0.0/8"),
	// Carrier-grade NAT, which clouds (Tailscale, some VPCs) use internally.
	netip.MustParsePrefix("100.64.0.0/10"),
	// IETF protocol assignments, documentation and benchmarking ranges: never
	// a merchant's server, sometimes someone's internal network.
	netip.MustParsePrefix("192.0.0.0/24"),
	netip.MustParsePrefix("192.0.2.0/24"),
	netip.MustParsePrefix("198.18.0.0/15"),
	netip.MustParsePrefix("198.51.100.0/24"),
	netip.MustParsePrefix("203.0.113.0/24"),
	// Reserved, including the limited broadcast 255.255.255.255.
	netip.MustParsePrefix("240.0.0.0/4"),
	// Deprecated IPv4-compatible IPv6 (::a.b.c.d), which some stacks still
	// route to the embedded IPv4 address.
	netip.MustParsePrefix("::/96"),
	// Discard-only, documentation and deprecated site-local IPv6.
	netip.MustParsePrefix("100::/64"),
	netip.MustParsePrefix("2001:db8::/32"),
	netip.MustParsePrefix("fec0::/10"),
	// Teredo hides an obfuscated IPv4 address and is all but unused.
	netip.MustParsePrefix("2001::/32"),
	// Local-use NAT64 prefix: by definition inside someone's network.
	netip.MustParsePrefix("64:ff9b:1::/48"),
}

var (
	// Through a NAT64 gateway 64:ff9b::a00:1 is 10.0.0.1, and through a
	// 6to4 relay 2002:a00:1:: is too, so their embedded IPv4 addresses
	// are judged instead of the IPv6 wrapper.
	nat64Prefix = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour   = netip.MustParsePrefix("2002::/16")
)

// PublicAddress reports whether ip is a public unicast address: the rule
// every outgoing connection paygate makes to an address it did not choose
// follows (webhook endpoints here, report downloads elsewhere).
func PublicAddress(ip netip.Addr) bool { return allowedIP(ip) }

// allowedIP reports whether ip is a public unicast address a webhook may
// be sent to. IPv4-mapped IPv6 addresses (::ffff:127.0.0.1) are judged as
// the IPv4 address they are.
func allowedIP(ip netip.Addr) bool {
	ip = ip.Unmap()
	if !ip.IsValid() ||
		ip.IsUnspecified() ||
		ip.IsLoopback() ||
		ip.IsPrivate() ||
		ip.IsLinkLocalUnicast() ||
		ip.IsLinkLocalMulticast() ||
		ip.IsInterfaceLocalMulticast() ||
		ip.IsMulticast() {
		return false
	}
	for _, p := range deniedPrefixes {
		if p.Contains(ip) {
			return false
		}
	}
	if nat64Prefix.Contains(ip) {
		b := ip.As16()
		return allowedIP(netip.AddrFrom4([4]byte(b[12:16])))
	}
	if sixToFour.Contains(ip) {
		b := ip.As16()
		return allowedIP(netip.AddrFrom4([4]byte(b[2:6])))
	}
	return true
}

// CheckURL vets an endpoint URL when a merchant creates or edits it.
//
// It returns ErrInvalidURL (wrapped, with the reason) for a URL longer
// than MaxURLLength, unparseable, relative, with a scheme other than http
// or https, with user:password credentials, without a host, with a bad
// port, or with a fragment (never sent, so it cannot mean what the
// merchant thinks).
//
// Unless g.AllowPrivate, it returns ErrForbiddenURL (wrapped) for plain
// http, for a host that is or resolves to any address allowedIP refuses,
// and for a host that does not resolve. Resolution uses g.Resolver under
// ctx, capped at a few seconds. Passing here is no licence to connect
// later: the sender's dialer checks again at every connection.
func CheckURL(ctx context.Context, raw string, g GuardConfig) error {
	if len(raw) > MaxURLLength {
		return fmt.Errorf("%w: longer than %d characters", ErrInvalidURL, MaxURLLength)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidURL, err)
	}
	switch {
	case !u.IsAbs():
		return fmt.Errorf("%w: not an absolute url", ErrInvalidURL)
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("%w: scheme %q, want https", ErrInvalidURL, u.Scheme)
	case u.User != nil:
		return fmt.Errorf("%w: credentials in the url are not allowed", ErrInvalidURL)
	case u.Opaque != "" || u.Hostname() == "":
		return fmt.Errorf("%w: no host", ErrInvalidURL)
	case strings.Contains(raw, "#"):
		return fmt.Errorf("%w: fragments are not sent", ErrInvalidURL)
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("%w: port %q out of range", ErrInvalidURL, p)
		}
	}

	if g.AllowPrivate {
		// Nothing left to check: resolving would only serve the private
		// rule, and development hosts often resolve only where the worker runs.
		return nil
	}
	if u.Scheme != "https" {
		return fmt.Errorf("%w: plain http is not allowed, use https", ErrForbiddenURL)
	}
	host := u.Hostname()
	if ip, err := netip.ParseAddr(host); err == nil {
		if !allowedIP(ip) {
			return fmt.Errorf("%w: %s is not a public address", ErrForbiddenURL, ip)
		}
		return nil
	}

	ctx, cancel := context.WithTimeout(ctx, resolveTimeout)
	defer cancel()
	ips, err := g.resolver().LookupNetIP(ctx, "ip", host)
	if err != nil {
		if dnsErr, ok := errors.AsType[*net.DNSError](err); ok && dnsErr.IsNotFound {
			return fmt.Errorf("%w: host %q does not resolve", ErrForbiddenURL, host)
		}
		return fmt.Errorf("%w: resolve host %q: %w", ErrForbiddenURL, host, err)
	}
	if len(ips) == 0 {
		return fmt.Errorf("%w: host %q does not resolve", ErrForbiddenURL, host)
	}
	for _, ip := range ips {
		if !allowedIP(ip) {
			return fmt.Errorf("%w: host %q resolves to %s, which is not a public address",
				ErrForbiddenURL, host, ip)
		}
	}
	return nil
}
