package delivery

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestAllowedIP(t *testing.T) {
	t.Parallel()

	tests := []struct {
		ip   string
		want bool
	}{
		{"93.184.216.34", true},
		{"8.8.8.8", true},
		{"2606:4700:4700::1111", true},
		{"2001:4860:4860::8888", true},
		{"::ffff:93.184.216.34", true},

		{"127.0.0.1", false},
		{"127.255.255.254", false},
		{"::1", false},
		{"10.0.0.1", false},
		{"172.16.0.1", false},
		{"172.31.255.255", false},
		{"172.32.0.1", true},
		{"192.168.1.1", false},
		{"169.254.169.254", false}, // cloud metadata
		{"169.254.0.1", false},
		{"fe80::1", false},
		{"fc00::1", false},
		{"fd00:ec2::254", false}, // AWS metadata over IPv6
		{"224.0.0.1", false},
		{"239.255.255.250", false},
		{"ff02::1", false},
		{"ff05::1", false},
		{"0.0.0.0", false},
		{"::", false},
		{"0.1.2.3", false},
		{"100.63.255.255", true},
		{"100.64.0.0", false},
		{"100.127.255.255", false},
		{"100.128.0.0", true},
		{"255.255.255.255", false},
		{"240.0.0.1", false},
		{"192.0.0.170", false},
		{"198.18.0.1", false},

		{"::ffff:127.0.0.1", false},
		{"::ffff:10.0.0.1", false},
		{"::ffff:169.254.169.254", false},
		{"::ffff:0.0.0.0", false},
		{"::ffff:100.64.0.1", false},
		{"::ffff:255.255.255.255", false},
		{"::127.0.0.1", false},          // IPv4-compatible, deprecated
		{"64:ff9b::a00:1", false},       // NAT64 of 10.0.0.1
		{"64:ff9b::7f00:1", false},      // NAT64 of 127.0.0.1
		{"64:ff9b::5db8:d822", true},    // NAT64 of 93.184.216.34
		{"64:ff9b:1::5db8:d822", false}, // local-use NAT64
		{"2002:a00:1::", false},         // 6to4 of 10.0.0.1
		{"2002:5db8:d822::1", true},     // 6to4 of 93.184.216.34
		{"2001:db8::1", false},          // documentation
		{"2001:0:4136:e378::1", false},  // Teredo
		{"fec0::1", false},              // site-local
	}
	for _, tt := range tests {
		t.Run(tt.ip, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, allowedIP(netip.MustParseAddr(tt.ip)))
		})
	}
	require.False(t, allowedIP(netip.Addr{}), "the zero Addr is not an address")
}

func TestGuardControl(t *testing.T) {
	t.Parallel()

	closed := GuardConfig{}
	require.NoError(t, closed.control("tcp4", "93.184.216.34:443", nil))
	for _, addr := range []string{"127.0.0.1:443", "[::1]:443", "10.0.0.1:80", "[::ffff:169.254.169.254]:80", "[fe80::1%lo]:80", "garbage"} {
		require.ErrorIs(t, closed.control("tcp", addr, nil), ErrPrivateAddress, addr)
	}
	require.NoError(t, GuardConfig{AllowPrivate: true}.control("tcp4", "127.0.0.1:443", nil))

	onePort := GuardConfig{permit: func(ap netip.AddrPort) bool { return ap.Port() == 8443 }}
	require.NoError(t, onePort.control("tcp4", "127.0.0.1:8443", nil))
	require.ErrorIs(t, onePort.control("tcp4", "127.0.0.1:8444", nil), ErrPrivateAddress)
}

func TestCheckURL(t *testing.T) {
	t.Parallel()

	dns := newFakeDNS(t)
	dns.set("public.example.test", netip.MustParseAddr("93.184.216.34"))
	dns.set("internal.example.test", netip.MustParseAddr("10.0.0.1"))
	dns.set("metadata.example.test", netip.MustParseAddr("169.254.169.254"))
	dns.set("mapped.example.test", netip.MustParseAddr("::ffff:127.0.0.1"))

	closed := GuardConfig{Resolver: dns.resolver()}
	open := GuardConfig{AllowPrivate: true, Resolver: dns.resolver()}
	long := func(n int) string {
		const base = "https://93.184.216.34/"
		return base + strings.Repeat("a", n-len(base))
	}

	tests := []struct {
		name     string
		url      string
		g        GuardConfig
		wantErr  error
		resolves bool // whether CheckURL must ask DNS at all
	}{
		{name: "https public ip literal", url: "https://93.184.216.34/hooks?x=1", g: closed},
		{name: "https public ipv6 literal", url: "https://[2606:4700:4700::1111]:8443/h", g: closed},
		{name: "2048 characters", url: long(2048), g: closed},
		{name: "https public name", url: "https://public.example.test/h", g: closed, resolves: true},

		{name: "2049 characters", url: long(2049), g: closed, wantErr: ErrInvalidURL},
		{name: "ftp", url: "ftp://93.184.216.34/h", g: closed, wantErr: ErrInvalidURL},
		{name: "javascript", url: "javascript:alert(1)", g: closed, wantErr: ErrInvalidURL},
		{name: "credentials", url: "https://user:pass@93.184.216.34/h", g: closed, wantErr: ErrInvalidURL},
		{name: "user only", url: "https://user@93.184.216.34/h", g: closed, wantErr: ErrInvalidURL},
		{name: "relative path", url: "/hooks", g: closed, wantErr: ErrInvalidURL},
		{name: "no scheme", url: "93.184.216.34/hooks", g: closed, wantErr: ErrInvalidURL},
		{name: "no host", url: "https:///hooks", g: closed, wantErr: ErrInvalidURL},
		{name: "opaque", url: "https:93.184.216.34", g: closed, wantErr: ErrInvalidURL},
		{name: "empty", url: "", g: closed, wantErr: ErrInvalidURL},
		{name: "unparseable", url: "https://93.184.216.34/%zz", g: closed, wantErr: ErrInvalidURL},
		{name: "control character", url: "https://93.184.216.34/\n", g: closed, wantErr: ErrInvalidURL},
		{name: "fragment", url: "https://93.184.216.34/h#frag", g: closed, wantErr: ErrInvalidURL},
		{name: "port zero", url: "https://93.184.216.34:0/h", g: closed, wantErr: ErrInvalidURL},
		{name: "port too big", url: "https://93.184.216.34:70000/h", g: closed, wantErr: ErrInvalidURL},

		{name: "http without allow private", url: "http://93.184.216.34/h", g: closed, wantErr: ErrForbiddenURL},
		{name: "loopback literal", url: "https://127.0.0.1/h", g: closed, wantErr: ErrForbiddenURL},
		{name: "private literal", url: "https://10.0.0.1/h", g: closed, wantErr: ErrForbiddenURL},
		{name: "metadata literal", url: "https://169.254.169.254/latest/meta-data", g: closed, wantErr: ErrForbiddenURL},
		{name: "cgnat literal", url: "https://100.64.0.1/h", g: closed, wantErr: ErrForbiddenURL},
		{name: "unspecified literal", url: "https://0.0.0.0/h", g: closed, wantErr: ErrForbiddenURL},
		{name: "ipv6 loopback literal", url: "https://[::1]/h", g: closed, wantErr: ErrForbiddenURL},
		{name: "mapped loopback literal", url: "https://[::ffff:127.0.0.1]/h", g: closed, wantErr: ErrForbiddenURL},
		{name: "link-local with zone", url: "https://[fe80::1%25eth0]/h", g: closed, wantErr: ErrForbiddenURL},
		{name: "name resolving private", url: "https://internal.example.test/h", g: closed, wantErr: ErrForbiddenURL, resolves: true},
		{name: "name resolving to metadata", url: "https://metadata.example.test/h", g: closed, wantErr: ErrForbiddenURL, resolves: true},
		{name: "name resolving to mapped loopback", url: "https://mapped.example.test/h", g: closed, wantErr: ErrForbiddenURL, resolves: true},
		{name: "name not resolving", url: "https://nowhere.example.test/h", g: closed, wantErr: ErrForbiddenURL, resolves: true},

		{name: "allow private: http loopback", url: "http://127.0.0.1:8080/x", g: open},
		{name: "allow private: private name", url: "http://internal.example.test/x", g: open},
		{name: "allow private: still no ftp", url: "ftp://127.0.0.1/x", g: open, wantErr: ErrInvalidURL},
		{name: "allow private: still no credentials", url: "http://a:b@127.0.0.1/x", g: open, wantErr: ErrInvalidURL},
		{name: "allow private: still bounded", url: "http://127.0.0.1/" + strings.Repeat("a", 2048), g: open, wantErr: ErrInvalidURL},
	}
	// Not parallel: each case counts the fake server's questions.
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := dns.questions.Load()
			err := CheckURL(t.Context(), tt.url, tt.g)
			if tt.wantErr == nil {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, tt.wantErr)
				other := ErrForbiddenURL
				if tt.wantErr == ErrForbiddenURL {
					other = ErrInvalidURL
				}
				require.NotErrorIs(t, err, other)
			}
			// Search domains in resolv.conf may add questions, so only
			// whether DNS was asked is stable.
			require.Equal(t, tt.resolves, dns.questions.Load() > before, "DNS asked")
		})
	}
}

func TestCheckURLMessages(t *testing.T) {
	t.Parallel()

	dns := newFakeDNS(t)
	dns.set("internal.example.test", netip.MustParseAddr("10.0.0.1"))
	g := GuardConfig{Resolver: dns.resolver()}

	err := CheckURL(t.Context(), "https://nowhere.example.test/h", g)
	require.ErrorContains(t, err, `host "nowhere.example.test" does not resolve`)
	err = CheckURL(t.Context(), "https://internal.example.test/h", g)
	require.ErrorContains(t, err, "resolves to 10.0.0.1")
	err = CheckURL(t.Context(), "http://93.184.216.34/h", g)
	require.ErrorContains(t, err, "use https")
}

func TestCheckURLResolverDeadline(t *testing.T) {
	t.Parallel()

	// A DNS server that never answers: CheckURL must give up when the
	// caller's context does, and say it could not resolve.
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { pc.Close() })
	g := GuardConfig{Resolver: &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "udp", pc.LocalAddr().String())
	}}}

	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	err = CheckURL(ctx, "https://silent.example.test/h", g)
	require.ErrorIs(t, err, ErrForbiddenURL)
	require.True(t, errors.Is(err, context.DeadlineExceeded) || isTimeout(err), "got %v", err)
}

func isTimeout(err error) bool {
	ne, ok := errors.AsType[net.Error](err)
	return ok && ne.Timeout()
}

// fakeDNS is a minimal DNS server over UDP on 127.0.0.1 that answers A
// and AAAA questions from a table the test can change at any time, so a
// test can make a name answer differently when an endpoint is checked and
// when it is sent to.
type fakeDNS struct {
	pc        net.PacketConn
	mu        sync.Mutex
	answers   map[string]netip.Addr // lowercase name without the final dot
	questions atomic.Int64
}

func newFakeDNS(t *testing.T) *fakeDNS {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	require.NoError(t, err)
	f := &fakeDNS{pc: pc, answers: map[string]netip.Addr{}}
	t.Cleanup(func() { pc.Close() })
	go f.serve()
	return f
}

func (f *fakeDNS) set(name string, addr netip.Addr) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.answers[name] = addr
}

// resolver returns a pure-Go resolver whose every query goes to f.
func (f *fakeDNS) resolver() *net.Resolver {
	return &net.Resolver{
		PreferGo: true,
		Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "udp", f.pc.LocalAddr().String())
		},
	}
}

func (f *fakeDNS) serve() {
	buf := make([]byte, 1500)
	for {
		n, from, err := f.pc.ReadFrom(buf)
		if err != nil {
			return
		}
		if reply := f.answer(buf[:n]); reply != nil {
			_, _ = f.pc.WriteTo(reply, from)
		}
	}
}

const (
	dnsTypeA    = 1
	dnsTypeAAAA = 28
)

// answer builds the reply to one query: the header, the question copied
// as asked, and at most one answer record pointing back at the question
// name. Everything else in the query (EDNS0 and such) is ignored.
func (f *fakeDNS) answer(q []byte) []byte {
	if len(q) < 12 || binary.BigEndian.Uint16(q[4:6]) != 1 {
		return nil
	}
	var labels []string
	i := 12
	for i < len(q) && q[i] != 0 {
		l := int(q[i])
		if l&0xc0 != 0 || i+1+l > len(q) {
			return nil
		}
		labels = append(labels, string(q[i+1:i+1+l]))
		i += 1 + l
	}
	end := i + 1 + 4 // zero label, qtype, qclass
	if end > len(q) {
		return nil
	}
	f.questions.Add(1)
	qtype := binary.BigEndian.Uint16(q[i+1 : i+3])
	name := strings.ToLower(strings.Join(labels, "."))

	f.mu.Lock()
	addr, known := f.answers[name]
	f.mu.Unlock()

	var rdata []byte
	switch {
	case known && qtype == dnsTypeA && addr.Is4():
		b := addr.As4()
		rdata = b[:]
	case known && qtype == dnsTypeAAAA && !addr.Is4():
		b := addr.As16()
		rdata = b[:]
	}

	r := make([]byte, 0, end+16+len(rdata))
	r = append(r, q[0], q[1]) // id
	flags := uint16(0x8180)   // response, recursion desired and available
	if !known {
		flags |= 3 // NXDOMAIN
	}
	r = binary.BigEndian.AppendUint16(r, flags)
	r = binary.BigEndian.AppendUint16(r, 1) // questions
	ancount := uint16(0)
	if rdata != nil {
		ancount = 1
	}
	r = binary.BigEndian.AppendUint16(r, ancount)
	r = binary.BigEndian.AppendUint16(r, 0) // authority
	r = binary.BigEndian.AppendUint16(r, 0) // additional
	r = append(r, q[12:end]...)
	if rdata != nil {
		r = append(r, 0xc0, 12) // name: pointer to the question's
		r = binary.BigEndian.AppendUint16(r, qtype)
		r = binary.BigEndian.AppendUint16(r, 1) // class IN
		r = binary.BigEndian.AppendUint32(r, 0) // TTL: never cache
		r = binary.BigEndian.AppendUint16(r, uint16(len(rdata)))
		r = append(r, rdata...)
	}
	return r
}
