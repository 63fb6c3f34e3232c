package console

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"

	"github.com/labstack/echo/v4"
)

// answer is one response of the API.
type answer struct {
	status int
	header http.Header
	body   []byte
}

func (a answer) ok() bool { return a.status >= 200 && a.status < 300 }

// decode reads a successful answer's JSON into v.
func (a answer) decode(v any) error {
	if err := json.Unmarshal(a.body, v); err != nil {
		return fmt.Errorf("decode api answer (%d): %w", a.status, err)
	}
	return nil
}

// problem is the text to show for an unsuccessful answer: the API's
// problem+json title and detail, as the API wrote them.
func (a answer) problem() string {
	var p struct {
		Title  string `json:"title"`
		Detail string `json:"detail"`
	}
	if json.Unmarshal(a.body, &p) == nil && p.Title != "" {
		if p.Detail != "" {
			return fmt.Sprintf("%s (%d): %s", p.Title, a.status, p.Detail)
		}
		return fmt.Sprintf("%s (%d)", p.Title, a.status)
	}
	return fmt.Sprintf("the API answered %d %s", a.status, http.StatusText(a.status))
}

// call sends one request to the API in-process with token (a token
// session's; "" for a person's, whom ctx carries). body, when not nil, is
// sent as JSON; key, when not "", as the Idempotency-Key.
func (c *Console) call(ctx context.Context, token, method, path string, query url.Values, body any, key string) answer {
	req, failed := c.request(ctx, token, method, path, query, body, key)
	if req == nil {
		return failed
	}
	rec := httptest.NewRecorder()
	c.cfg.API.ServeHTTP(rec, req)
	return answer{status: rec.Code, header: rec.Header(), body: rec.Body.Bytes()}
}

// request builds an API request, or the answer to give when it cannot.
func (c *Console) request(ctx context.Context, token, method, path string, query url.Values, body any, key string) (*http.Request, answer) {
	var rd io.Reader = http.NoBody
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			return nil, answer{status: http.StatusInternalServerError}
		}
		rd = bytes.NewReader(raw)
	}
	target := path
	if len(query) > 0 {
		target += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, target, rd)
	if err != nil {
		return nil, answer{status: http.StatusBadRequest, body: []byte(`{"title":"Bad request","detail":"the console could not build this request"}`)}
	}
	req.RemoteAddr = "127.0.0.1:0"
	if p, ok := ctx.Value(peerKey{}).(peer); ok {
		req.RemoteAddr = p.remoteAddr
		for _, f := range p.forwarded {
			req.Header.Add(echo.HeaderXForwardedFor, f)
		}
	}
	if token != "" {
		// A person's session has none: its calls carry the person in
		// ctx (withRequestID).
		req.Header.Set("Authorization", "Bearer "+token)
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	if id, ok := ctx.Value(requestIDKey{}).(string); ok {
		req.Header.Set(echo.HeaderXRequestID, id)
	}
	return req, answer{}
}

// relay sends a GET to the API and, when it succeeds, streams its answer
// to w as the API writes it, with the headers named in keep: a download of
// any size passes through without being held. A failed answer is not
// written; it is returned, body and all, for the console to show.
func (c *Console) relay(ctx context.Context, token, path string, query url.Values, w *echo.Response, keep ...string) answer {
	req, failed := c.request(ctx, token, http.MethodGet, path, query, nil, "")
	if req == nil {
		return failed
	}
	r := &relayWriter{dst: w, header: http.Header{}, keep: keep}
	c.cfg.API.ServeHTTP(r, req)
	if r.status == 0 {
		r.WriteHeader(http.StatusOK)
	}
	return answer{status: r.status, header: r.header, body: r.failed.Bytes()}
}

// relayWriter is the http.ResponseWriter of relay.
type relayWriter struct {
	dst    *echo.Response
	header http.Header
	keep   []string
	status int
	failed bytes.Buffer
}

func (r *relayWriter) Header() http.Header { return r.header }

func (r *relayWriter) WriteHeader(status int) {
	if r.status != 0 {
		return
	}
	r.status = status
	if status < 200 || status >= 300 {
		return
	}
	for _, k := range r.keep {
		if v := r.header.Get(k); v != "" {
			r.dst.Header().Set(k, v)
		}
	}
	r.dst.WriteHeader(status)
}

func (r *relayWriter) Write(p []byte) (int, error) {
	if r.status == 0 {
		r.WriteHeader(http.StatusOK)
	}
	if r.status < 200 || r.status >= 300 {
		return r.failed.Write(p)
	}
	return r.dst.Write(p)
}

// apiPath joins escaped path segments under /v1.
func apiPath(segments ...string) string {
	var b strings.Builder
	b.WriteString("/v1")
	for _, s := range segments {
		b.WriteByte('/')
		b.WriteString(url.PathEscape(s))
	}
	return b.String()
}
