package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	paygatedelivery "github.com/paygate/paygate/delivery"
)

// TestReceiverTakesPaygatesDeliveries: the bench's receiver answers
// paygate's own sender 200 for each signed delivery on one kept-alive
// connection and counts them; it refuses what it cannot read (a body
// without a length, a malformed head) and closes the connection.
func TestReceiverTakesPaygatesDeliveries(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	rc := &receiver{}
	done := make(chan error, 1)
	go func() { done <- rc.serve(ln) }()
	base := "http://" + ln.Addr().String()

	sender := paygatedelivery.NewSender(paygatedelivery.SenderConfig{Guard: paygatedelivery.GuardConfig{AllowPrivate: true}, Timeout: 5 * time.Second})
	var reused int
	ctx := httptrace.WithClientTrace(t.Context(), &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) {
		if i.Reused {
			reused++
		}
	}})
	for i := range 3 {
		res := sender.Send(ctx, paygatedelivery.Request{
			URL: base + "/paygate", MessageID: fmt.Sprintf("msg_%d", i), Body: []byte(`{"type":"payment.succeeded","data":{}}`),
			Secrets: []string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}, Now: time.Now(),
		})
		require.NoError(t, res.Err)
		require.Equal(t, http.StatusOK, res.Status)
	}
	require.Equal(t, 2, reused, "one connection, kept alive")

	get := func(path string) (int, string) {
		resp, err := http.Get(base + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(b)
	}
	status, body := get("/count")
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, "3\n", body)
	status, _ = get("/healthz")
	require.Equal(t, http.StatusOK, status)
	status, _ = get("/elsewhere")
	require.Equal(t, http.StatusNotFound, status)

	raw := func(request string) string {
		c, err := net.Dial("tcp", ln.Addr().String())
		require.NoError(t, err)
		defer c.Close()
		_, err = io.WriteString(c, request)
		require.NoError(t, err)
		require.NoError(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
		b, err := io.ReadAll(bufio.NewReader(c)) // the receiver closes it
		require.NoError(t, err)
		return string(b)
	}
	require.True(t, strings.HasPrefix(raw("POST /paygate HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"),
		"HTTP/1.1 411 "))
	require.True(t, strings.HasPrefix(raw("POST /paygate\r\n\r\n"), "HTTP/1.1 400 "))
	require.True(t, strings.HasPrefix(raw("POST /paygate HTTP/1.1\r\nContent-Length: -1\r\n\r\n"), "HTTP/1.1 400 "))
	require.True(t, strings.HasPrefix(raw("GET /count HTTP/1.1\r\nConnection: close\r\n\r\n"), "HTTP/1.1 200 OK\r\n"))
	status, body = get("/count")
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, "3\n", body, "refused requests are not counted")

	require.NoError(t, ln.Close())
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("serve did not return once its listener closed")
	}
}
