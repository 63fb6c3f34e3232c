package delivery

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// testServer is an httptest server that counts the connections it
// accepted and the requests it served, so a test can prove that a refused
// attempt never reached it.
type testServer struct {
	*httptest.Server
	conns    atomic.Int64
	requests atomic.Int64
}

func newTestServer(t *testing.T, tls bool, h http.HandlerFunc) *testServer {
	t.Helper()
	s := &testServer{}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.requests.Add(1)
		h(w, r)
	}))
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			s.conns.Add(1)
		}
	}
	if tls {
		s.StartTLS()
	} else {
		s.Start()
	}
	t.Cleanup(s.Close)
	return s
}

func (s *testServer) port() string {
	u, _ := url.Parse(s.URL)
	return u.Port()
}

func okHandler(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }

func testRequest(u string) Request {
	return Request{
		URL:       u,
		MessageID: "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W",
		Body:      []byte(`{"type":"payment.succeeded","data":{"id":"pay_1","amount":"12.50"}}`),
		Secrets:   []string{vecGoSecret},
		Now:       time.Unix(1674087231, 0),
	}
}

func openSender() *Sender {
	return NewSender(SenderConfig{Guard: GuardConfig{AllowPrivate: true}, Timeout: 5 * time.Second})
}

func TestSendDelivers(t *testing.T) {
	t.Parallel()

	type seen struct {
		method, path string
		header       http.Header
		body         []byte
	}
	got := make(chan seen, 1)
	srv := newTestServer(t, false, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- seen{r.Method, r.URL.RequestURI(), r.Header.Clone(), b}
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, "thanks")
	})

	previous, err := NewSecret()
	require.NoError(t, err)
	req := testRequest(srv.URL + "/hooks/paygate?tenant=7")
	req.Secrets = []string{vecGoSecret, previous}
	s := NewSender(SenderConfig{Guard: GuardConfig{AllowPrivate: true}, UserAgent: "paygate-test/9"})

	res := s.Send(t.Context(), req)
	require.NoError(t, res.Err)
	require.Equal(t, http.StatusOK, res.Status)
	require.True(t, res.Succeeded())
	require.False(t, res.Gone())
	require.Equal(t, "thanks", res.Body)
	require.Positive(t, res.Duration)

	r := <-got
	require.Equal(t, http.MethodPost, r.method)
	require.Equal(t, "/hooks/paygate?tenant=7", r.path)
	require.Equal(t, req.Body, r.body, "body byte for byte")
	require.Equal(t, []string{"application/json"}, r.header.Values("Content-Type"))
	require.Equal(t, []string{"paygate-test/9"}, r.header.Values("User-Agent"))
	require.Equal(t, []string{req.MessageID}, r.header.Values("Webhook-Id"))
	require.Equal(t, []string{"1674087231"}, r.header.Values("Webhook-Timestamp"))
	for name := range r.header {
		if strings.HasPrefix(strings.ToLower(name), "webhook-") {
			require.Contains(t, []string{"Webhook-Id", "Webhook-Timestamp", "Webhook-Signature"}, name)
		}
	}

	// Verify the way a receiver would, by hand: one v1 signature per
	// secret, current first, each over id.timestamp.body.
	sigs := strings.Split(r.header.Get("Webhook-Signature"), " ")
	require.Len(t, sigs, 2)
	for i, secret := range req.Secrets {
		key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
		require.NoError(t, err)
		mac := hmac.New(sha256.New, key)
		_, _ = fmt.Fprintf(mac, "%s.%s.%s", r.header.Get("Webhook-Id"), r.header.Get("Webhook-Timestamp"), r.body)
		want := "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
		require.Equal(t, want, sigs[i], "signature %d", i)
	}
}

func TestSendRefusesPrivateAddresses(t *testing.T) {
	t.Parallel()

	plain := newTestServer(t, false, okHandler)
	tls := newTestServer(t, true, okHandler)
	s := NewSender(SenderConfig{Timeout: 5 * time.Second})

	tests := []struct {
		name string
		url  string
		srv  *testServer // nil: nothing listens there
	}{
		{name: "http loopback", url: plain.URL + "/h", srv: plain},
		{name: "https loopback", url: tls.URL + "/h", srv: tls},
		{name: "localhost name", url: "http://localhost:" + plain.port() + "/h", srv: plain},
		{name: "mapped loopback", url: "http://[::ffff:127.0.0.1]:" + plain.port() + "/h", srv: plain},
		{name: "metadata", url: "http://169.254.169.254/latest/meta-data/"},
		{name: "private", url: "https://10.0.0.1/h"},
		{name: "unspecified", url: "http://0.0.0.0:" + plain.port() + "/h", srv: plain},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := s.Send(t.Context(), testRequest(tt.url))
			require.ErrorIs(t, res.Err, ErrPrivateAddress)
			require.Zero(t, res.Status)
			require.False(t, res.Succeeded())
			if tt.srv != nil {
				require.Zero(t, tt.srv.conns.Load(), "a connection reached the server")
				require.Zero(t, tt.srv.requests.Load())
			}
		})
	}
}

func TestSendRefusesRebinding(t *testing.T) {
	t.Parallel()

	srv := newTestServer(t, true, okHandler)
	tests := []struct {
		name   string
		target netip.Addr
	}{
		{name: "to a private network", target: netip.MustParseAddr("10.0.0.1")},
		{name: "to loopback where a server listens", target: netip.MustParseAddr("127.0.0.1")},
		{name: "to the metadata service", target: netip.MustParseAddr("169.254.169.254")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dns := newFakeDNS(t)
			g := GuardConfig{Resolver: dns.resolver()}
			u := "https://hook.example.test:" + srv.port() + "/h"

			// At creation the name answers with a public address...
			dns.set("hook.example.test", netip.MustParseAddr("93.184.216.34"))
			require.NoError(t, CheckURL(t.Context(), u, g))

			// ...and at send time with a private one.
			dns.set("hook.example.test", tt.target)
			before := dns.questions.Load()
			res := NewSender(SenderConfig{Guard: g, Timeout: 5 * time.Second}).Send(t.Context(), testRequest(u))
			require.ErrorIs(t, res.Err, ErrPrivateAddress)
			require.ErrorContains(t, res.Err, tt.target.String())
			require.Zero(t, res.Status)
			require.Greater(t, dns.questions.Load(), before, "the sender must resolve afresh")
			require.Zero(t, srv.conns.Load(), "a connection reached the server")
		})
	}
}

func TestSendDoesNotFollowRedirects(t *testing.T) {
	t.Parallel()

	target := newTestServer(t, false, okHandler)
	redirector := newTestServer(t, false, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.URL+"/stolen", http.StatusFound)
	})
	redirectorPort, err := strconv.Atoi(redirector.port())
	require.NoError(t, err)

	tests := []struct {
		name  string
		guard GuardConfig
	}{
		// The guard is on and lets through only the redirecting server:
		// following the redirect would end in ErrPrivateAddress, not 302.
		{name: "guarded", guard: GuardConfig{permit: func(ap netip.AddrPort) bool {
			return ap.Addr().IsLoopback() && int(ap.Port()) == redirectorPort
		}}},
		// Nothing stops the target but the redirect rule: following it
		// would reach the target and answer 204.
		{name: "private allowed", guard: GuardConfig{AllowPrivate: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := NewSender(SenderConfig{Guard: tt.guard, Timeout: 5 * time.Second})
			res := s.Send(t.Context(), testRequest(redirector.URL+"/h"))
			require.NoError(t, res.Err)
			require.Equal(t, http.StatusFound, res.Status)
			require.False(t, res.Succeeded())
			require.Zero(t, target.requests.Load(), "the redirect was followed")
		})
	}
	require.Equal(t, int64(2), redirector.requests.Load())
}

func TestSendResponseBody(t *testing.T) {
	t.Parallel()

	long := strings.Repeat("x", 10_000)
	cutRune := strings.Repeat("a", MaxResponseBody-1) + "é and more" // é straddles the limit
	tests := []struct {
		name string
		body string
		want string
	}{
		{name: "small", body: `{"error":"nope"}`, want: `{"error":"nope"}`},
		{name: "empty", body: "", want: ""},
		{name: "exactly the limit", body: long[:MaxResponseBody], want: long[:MaxResponseBody]},
		{name: "truncated to the limit", body: long, want: long[:MaxResponseBody]},
		{name: "invalid utf-8 and NUL replaced", body: "bad\xff\xfe byte\x00nul", want: "bad\uFFFD byte\uFFFDnul"},
		{name: "character cut at the limit dropped", body: cutRune, want: cutRune[:MaxResponseBody-1]},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := newTestServer(t, false, func(w http.ResponseWriter, _ *http.Request) {
				w.WriteHeader(http.StatusBadRequest)
				_, _ = io.WriteString(w, tt.body)
			})
			res := openSender().Send(t.Context(), testRequest(srv.URL))
			require.NoError(t, res.Err)
			require.Equal(t, http.StatusBadRequest, res.Status)
			require.Equal(t, tt.want, res.Body)
			require.True(t, utf8.ValidString(res.Body))
			require.LessOrEqual(t, len(res.Body), MaxResponseBody)
		})
	}
}

func TestSendReusesConnections(t *testing.T) {
	t.Parallel()

	// A body larger than what we keep but within what we drain must not
	// cost a new connection per attempt.
	srv := newTestServer(t, false, func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, strings.Repeat("y", 3*MaxResponseBody))
	})
	s := openSender()
	for range 3 {
		res := s.Send(t.Context(), testRequest(srv.URL))
		require.NoError(t, res.Err)
		require.Len(t, res.Body, MaxResponseBody)
	}
	require.Equal(t, int64(3), srv.requests.Load())
	require.Equal(t, int64(1), srv.conns.Load())
}

func TestSendTimeout(t *testing.T) {
	t.Parallel()

	const timeout = 300 * time.Millisecond
	// Handlers hang until the client goes away (the server notices once
	// the request body is read) or the server is being closed.
	hang := func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		select {
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
		}
	}
	stallBody := func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, "partial")
		w.(http.Flusher).Flush()
		hang(w, r)
	}

	tests := []struct {
		name       string
		handler    http.HandlerFunc
		wantStatus int
		wantBody   string
	}{
		{name: "no response", handler: hang},
		// The status came: the attempt has its answer, the rest of the
		// body is lost to the deadline.
		{name: "stalled body", handler: stallBody, wantStatus: http.StatusOK, wantBody: "partial"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := newTestServer(t, false, tt.handler)
			s := NewSender(SenderConfig{Guard: GuardConfig{AllowPrivate: true}, Timeout: timeout})
			res := s.Send(t.Context(), testRequest(srv.URL))
			require.GreaterOrEqual(t, res.Duration, timeout)
			require.Less(t, res.Duration, 3*time.Second)
			require.Equal(t, tt.wantStatus, res.Status)
			require.Equal(t, tt.wantBody, res.Body)
			if tt.wantStatus == 0 {
				require.Error(t, res.Err)
				require.True(t, isTimeout(res.Err), "want a timeout, got %v", res.Err)
				require.False(t, res.Succeeded())
			} else {
				require.NoError(t, res.Err)
			}
		})
	}
}

func TestSendConnectionRefused(t *testing.T) {
	t.Parallel()

	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())

	req := testRequest("http://" + addr + "/h")
	res := openSender().Send(t.Context(), req)
	require.ErrorIs(t, res.Err, syscall.ECONNREFUSED)
	require.Zero(t, res.Status)
	require.Empty(t, res.Body)
	require.False(t, res.Succeeded())
	require.NotContains(t, res.Err.Error(), string(req.Body))
	require.NotContains(t, res.Err.Error(), strings.TrimPrefix(vecGoSecret, "whsec_"))
}

func TestSendSignErrors(t *testing.T) {
	t.Parallel()

	srv := newTestServer(t, false, okHandler)
	const leaky = "whsec_c2VjcmV0LXRoYXQtbXVzdC1ub3QtbGVhaw" // bad padding
	tests := []struct {
		name    string
		mutate  func(*Request)
		wantErr error
	}{
		{name: "bad secret", mutate: func(r *Request) { r.Secrets = []string{vecGoSecret, leaky} }, wantErr: ErrInvalidSecret},
		{name: "no secret", mutate: func(r *Request) { r.Secrets = nil }, wantErr: ErrInvalidSecret},
		{name: "dotted id", mutate: func(r *Request) { r.MessageID = "msg.1" }, wantErr: ErrInvalidMessageID},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := testRequest(srv.URL)
			tt.mutate(&req)
			res := openSender().Send(t.Context(), req)
			require.ErrorIs(t, res.Err, tt.wantErr)
			require.Zero(t, res.Status)
			require.NotContains(t, res.Err.Error(), strings.TrimPrefix(leaky, "whsec_"))
			require.NotContains(t, res.Err.Error(), string(req.Body))
		})
	}
	require.Zero(t, srv.requests.Load(), "an unsigned message was sent")
}

func TestSendStatuses(t *testing.T) {
	t.Parallel()

	// future stands for an HTTP date an hour from when the subtest runs:
	// parallel subtests may wait long for a slot.
	const future = "<an hour from now>"
	tests := []struct {
		status         int
		retryAfter     string
		wantSucceeded  bool
		wantGone       bool
		wantRetryAfter time.Duration
		slack          time.Duration // for HTTP dates, which have whole seconds
	}{
		{status: 200, wantSucceeded: true},
		{status: 202, wantSucceeded: true},
		{status: 299, wantSucceeded: true},
		{status: 301},
		{status: 400},
		{status: 410, wantGone: true},
		{status: 500},
		{status: 429, retryAfter: "7", wantRetryAfter: 7 * time.Second},
		{status: 503, retryAfter: " 120 ", wantRetryAfter: 2 * time.Minute},
		{status: 503, retryAfter: future, wantRetryAfter: time.Hour, slack: 3 * time.Second},
		{status: 429, retryAfter: "Wed, 21 Oct 2015 07:28:00 GMT"}, // past
		{status: 429, retryAfter: "soon"},
		{status: 429, retryAfter: "-5"},
		{status: 429, retryAfter: "1.5"},
		{status: 429},
		{status: 500, retryAfter: "7"}, // only 429 and 503 ask us to wait
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%d %q", tt.status, tt.retryAfter), func(t *testing.T) {
			t.Parallel()
			retryAfter := tt.retryAfter
			if retryAfter == future {
				retryAfter = time.Now().Add(time.Hour).UTC().Format(http.TimeFormat)
			}
			srv := newTestServer(t, false, func(w http.ResponseWriter, _ *http.Request) {
				if retryAfter != "" {
					w.Header().Set("Retry-After", retryAfter)
				}
				w.WriteHeader(tt.status)
			})
			res := openSender().Send(t.Context(), testRequest(srv.URL))
			require.NoError(t, res.Err)
			require.Equal(t, tt.status, res.Status)
			require.Equal(t, tt.wantSucceeded, res.Succeeded())
			require.Equal(t, tt.wantGone, res.Gone())
			require.InDelta(t, tt.wantRetryAfter, res.RetryAfter, float64(tt.slack))
		})
	}
}

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()

	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		in   string
		want time.Duration
	}{
		{"0", 0},
		{"7", 7 * time.Second},
		{"Sun, 01 Mar 2026 12:01:30 GMT", 90 * time.Second},
		{"Sunday, 01-Mar-26 12:01:30 GMT", 90 * time.Second}, // RFC 850
		{"Sun Mar  1 12:01:30 2026", 90 * time.Second},       // asctime
		{"Sun, 01 Mar 2026 11:59:00 GMT", 0},
		{"99999999999999999999", 0}, // not a uint64
		{"9999999999", maxRetryAfter},
		{"", 0},
		{"7s", 0},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, parseRetryAfter(tt.in, now), tt.in)
	}
}

// The Sender is shared by the dispatcher's workers.
func TestSendConcurrent(t *testing.T) {
	t.Parallel()

	srv := newTestServer(t, false, okHandler)
	s := openSender()
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			res := s.Send(t.Context(), testRequest(srv.URL))
			require.NoError(t, res.Err)
			require.True(t, res.Succeeded())
		})
	}
	wg.Wait()
	require.Equal(t, int64(20), srv.requests.Load())
}
