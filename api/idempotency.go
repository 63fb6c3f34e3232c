package api

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/labstack/echo/v4"

	"github.com/paygate/paygate/jobs"
	"github.com/paygate/paygate/strictjson"
)

// Idempotency-Key (draft-ietf-httpapi-idempotency-key-header) on every POST
// under /v1.
//
// A request's key is claimed, before anything else happens, by inserting a
// row keyed by (caller identity, key) with ON CONFLICT DO NOTHING: the
// database decides which of two racing requests runs. The winner's handler
// does its work in the transaction TxFrom hands it; its response is buffered
// and stored in the key's row in that same transaction, just before commit.
// So a key is either unfinished or finished with exactly the response whose
// effects were committed; never an effect without its stored answer, or the
// reverse. A handler error or a 5xx rolls everything back and releases the
// claim, so the client can retry with the same key.
//
// The others are answered from the row: a different request under the same
// key (another body, or another route: the fingerprint covers method, path
// and the body as the handler reads it) 422; a key still being worked on 409; a finished key the stored
// status and body with Idempotent-Replayed: true. A claim whose request died
// with its process (no response after idempotencyLease) is taken over by the
// next request with the same fingerprint; if the first holder was only slow,
// storing its response then matches no row and it rolls back.
//
// A key is kept jobs.IdempotencyKeyRetention (24 hours) from its first
// claim (created_at, the column the purge reads). The idempotency_purge job
// runs only hourly, so a row past the window is treated as absent: the
// claim's INSERT replaces it in the same statement (ON CONFLICT DO UPDATE …
// WHERE expired), and the database alone decides which of two requests
// racing for an expired key runs.

const (
	// HeaderIdempotencyKey is the request header carrying the key.
	HeaderIdempotencyKey = "Idempotency-Key"
	// HeaderIdempotentReplayed marks a response replayed from a finished key.
	HeaderIdempotentReplayed = "Idempotent-Replayed"

	maxIdempotencyKeyLen = 255
	// idempotencyLease is how long a claim without a response holds its key
	// against takeover; handlers answer in well under a second.
	idempotencyLease = 60 * time.Second
	// maxPostBody bounds the body the middleware buffers to fingerprint.
	maxPostBody = 1 << 20
)

// Sentinel errors of the Idempotency-Key middleware.
var (
	ErrIdempotencyKeyMissing = errors.New("the Idempotency-Key header is required on this request")
	ErrIdempotencyKeyInvalid = errors.New("the Idempotency-Key header must be one key of 1 to 255 printable ASCII characters, bare or as a quoted string")
	ErrIdempotencyKeyInUse   = errors.New("a request with this Idempotency-Key is still being processed; retry later")
	ErrIdempotencyKeyReused  = errors.New("this Idempotency-Key was used for a different request (another body or route)")
	// ErrNoIdempotencyTx is returned by TxFrom outside the middleware.
	ErrNoIdempotencyTx = errors.New("no idempotency transaction on this request")
)

// ParseIdempotencyKey returns the key of an Idempotency-Key header value:
// a structured-field string ("abc", with \" and \\ escapes) or a bare token
// (abc), 1 to 255 printable ASCII characters either way. Both forms of the
// same characters are the same key.
//
// It fails with ErrIdempotencyKeyMissing and ErrIdempotencyKeyInvalid.
func ParseIdempotencyKey(values []string) (string, error) {
	if len(values) == 0 {
		return "", ErrIdempotencyKeyMissing
	}
	if len(values) > 1 {
		return "", ErrIdempotencyKeyInvalid
	}
	v := strings.Trim(values[0], " \t")
	if v == "" {
		return "", ErrIdempotencyKeyMissing
	}
	var key string
	if strings.HasPrefix(v, `"`) {
		var b strings.Builder
		closed := false
		for i := 1; i < len(v); i++ {
			ch := v[i]
			switch {
			case ch == '\\':
				i++
				if i >= len(v) || (v[i] != '"' && v[i] != '\\') {
					return "", ErrIdempotencyKeyInvalid
				}
				b.WriteByte(v[i])
			case ch == '"':
				if i != len(v)-1 {
					return "", ErrIdempotencyKeyInvalid
				}
				closed = true
			case ch < 0x20 || ch > 0x7e:
				return "", ErrIdempotencyKeyInvalid
			default:
				b.WriteByte(ch)
			}
		}
		if !closed {
			return "", ErrIdempotencyKeyInvalid
		}
		key = b.String()
	} else {
		// The bare form: visible ASCII without quotes, backslashes or the
		// structured-field separators, so UUIDs and the like pass as they
		// are sent in practice.
		for i := 0; i < len(v); i++ {
			ch := v[i]
			if ch <= 0x20 || ch > 0x7e || ch == '"' || ch == '\\' || ch == ',' || ch == ';' {
				return "", ErrIdempotencyKeyInvalid
			}
		}
		key = v
	}
	if key == "" || len(key) > maxIdempotencyKeyLen {
		return "", ErrIdempotencyKeyInvalid
	}
	return key, nil
}

// fingerprint identifies a request: method, path and its canonical form
// (canonicalRequest).
func fingerprint(method, path string, canonical []byte) []byte {
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%s\n", method, path)
	h.Write(canonical)
	return h.Sum(nil)
}

// canonicalRequest is what a POST's fingerprint covers: the request as its
// handler reads it. For a route registered with its body's type, the body
// decoded as the handler decodes it (decodeJSON) and encoded again, so that
// bodies meaning the same (other key order, spacing, escapes, a default
// spelled out) share a fingerprint and bodies the handler reads differently
// never do. Elsewhere, the body's canonical JSON (strictjson.Canonical). A
// body the handler would refuse is taken byte for byte. The prefixes keep
// the three forms apart.
func (s *Server) canonicalRequest(route string, body []byte) []byte {
	if t, ok := s.ops.postBodies[route]; ok {
		v := reflect.New(t).Interface()
		if err := decodeJSON(body, v); err == nil {
			if out, err := json.Marshal(v); err == nil {
				return append([]byte("request\n"), out...)
			}
		}
		return append([]byte("raw\n"), body...)
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return nil
	}
	if out, err := strictjson.Canonical(body); err == nil {
		return append([]byte("json\n"), out...)
	}
	return append([]byte("raw\n"), body...)
}

const idemKey = "paygate.idempotency"

// idemRequest is the middleware's state for one request, in the echo
// context.
type idemRequest struct {
	server      *Server
	ctx         context.Context
	key         string
	tx          pgx.Tx
	afterCommit []func()
}

// TxFrom returns the transaction of the request's Idempotency-Key, begun on
// first use. A POST handler under /v1 does all its writes in it and does not
// commit or roll it back: the middleware stores the handler's response in
// the same transaction and commits both, or rolls both back when the
// handler returns an error or answers 5xx.
//
// It fails with ErrNoIdempotencyTx outside the middleware (GET routes).
func TxFrom(c echo.Context) (pgx.Tx, error) {
	r, ok := c.Get(idemKey).(*idemRequest)
	if !ok {
		return nil, ErrNoIdempotencyTx
	}
	if r.tx == nil {
		tx, err := r.server.config.Pool.Begin(r.ctx)
		if err != nil {
			return nil, fmt.Errorf("begin: %w", err)
		}
		r.tx = tx
	}
	return r.tx, nil
}

// IdempotencyKeyOf returns the request's Idempotency-Key ("" outside the
// middleware), for the audit log.
func IdempotencyKeyOf(c echo.Context) string {
	if r, ok := c.Get(idemKey).(*idemRequest); ok {
		return r.key
	}
	return ""
}

// AfterCommit runs fn once the request's transaction has committed (at once
// outside the middleware): for counters and other effects that must not
// count a rolled-back action.
func AfterCommit(c echo.Context, fn func()) {
	if r, ok := c.Get(idemKey).(*idemRequest); ok {
		r.afterCommit = append(r.afterCommit, fn)
		return
	}
	fn()
}

// storedResponse is a finished key's answer.
type storedResponse struct {
	status      int
	contentType string
	location    string
	body        []byte
}

// post registers a POST route with the type of its JSON body (a zero value
// of the struct its handler decodes with decodeBody; nil for none) and the
// roles that may call it. The body's type makes the Idempotency-Key's
// fingerprint cover the request as the handler reads it. The roles are also
// checked before the Idempotency-Key, so that a caller without the right
// gets its 403 whatever it sent (routes registered with v1.POST and
// requireRole get their role check after the key's: still safe, since the
// claim is released on the 403).
func (s *Server) post(g *echo.Group, path string, h echo.HandlerFunc, body any, roles ...Role) *echo.Route {
	rt := g.POST(path, h, requireRole(roles...))
	if s.ops.postRoles == nil {
		s.ops.postRoles = map[string][]Role{}
		s.ops.postBodies = map[string]reflect.Type{}
	}
	s.ops.postRoles[rt.Path] = roles // the route's full path, as c.Path() reports it
	if body != nil {
		s.ops.postBodies[rt.Path] = reflect.TypeOf(body)
	}
	return rt
}

// idempotency is the Idempotency-Key middleware, mounted on the /v1 group
// after authentication. It applies to POST requests only.
func (s *Server) idempotency(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		req := c.Request()
		if req.Method != http.MethodPost {
			return next(c)
		}
		if roles, ok := s.ops.postRoles[c.Path()]; ok {
			if err := requireRole(roles...)(func(echo.Context) error { return nil })(c); err != nil {
				return err
			}
		}
		caller := callerOf(c)
		key, err := ParseIdempotencyKey(req.Header.Values(HeaderIdempotencyKey))
		if err != nil {
			return err
		}
		body, err := io.ReadAll(http.MaxBytesReader(c.Response(), req.Body, maxPostBody))
		if err != nil {
			var tooLarge *http.MaxBytesError
			if errors.As(err, &tooLarge) {
				return echo.NewHTTPError(http.StatusRequestEntityTooLarge, "request body too large")
			}
			return fmt.Errorf("%w: could not read the request body", ErrBadRequest)
		}
		req.Body = io.NopCloser(bytes.NewReader(body))
		fp := fingerprint(req.Method, req.URL.Path, s.canonicalRequest(c.Path(), body))

		ctx := req.Context()
		token, stored, err := s.claim(ctx, caller.idempotencyScope(), key, fp, req.Method, req.URL.Path)
		if err != nil {
			return err
		}
		if stored != nil {
			c.Response().Header().Set(HeaderIdempotentReplayed, "true")
			if stored.location != "" {
				c.Response().Header().Set(echo.HeaderLocation, stored.location)
			}
			if stored.contentType != "" {
				c.Response().Header().Set(echo.HeaderContentType, stored.contentType)
			}
			c.Response().WriteHeader(stored.status)
			_, err := c.Response().Write(stored.body)
			return err
		}
		return s.runClaimed(c, next, caller.idempotencyScope(), key, token)
	}
}

// runClaimed runs the handler under a claim held with token and stores its
// answer with its effects.
func (s *Server) runClaimed(c echo.Context, next echo.HandlerFunc, identity, key string, token []byte) error {
	ctx := c.Request().Context()
	r := &idemRequest{server: s, ctx: ctx, key: key}
	c.Set(idemKey, r)
	res := c.Response()
	orig := res.Writer
	buf := &bufferedWriter{header: http.Header{}}
	res.Writer = buf
	committed, answered := false, false
	defer func() {
		res.Writer = orig
		if !answered {
			// Nothing reached the client: let the error handler (or the
			// panic recovery) answer on the real writer.
			res.Committed, res.Status, res.Size = false, 0, 0
		}
		if committed {
			return
		}
		// A handler error, a 5xx, a failed commit or a panic: nothing
		// happened, and the key is free for a retry.
		if r.tx != nil {
			_ = r.tx.Rollback(context.WithoutCancel(ctx))
		}
		s.release(context.WithoutCancel(ctx), identity, key, token)
	}()
	answer := func(status int) {
		answered = true
		res.Committed, res.Status = true, status
		flush(orig, buf, status)
	}

	if err := next(c); err != nil {
		return err
	}
	status := res.Status
	if !res.Committed {
		status = http.StatusNoContent
	}
	if status >= 500 {
		answer(status)
		return nil
	}
	tx, err := TxFrom(c)
	if err != nil {
		return err
	}
	tag, err := tx.Exec(ctx, `
		UPDATE idempotency_keys SET
			completed_at = now(), response_status = $4, response_type = $5,
			response_location = nullif($6, ''), response_body = $7
		WHERE identity = $1 AND key = $2 AND claim_token = $3 AND completed_at IS NULL`,
		identity, key, token, status, buf.header.Get(echo.HeaderContentType),
		buf.header.Get(echo.HeaderLocation), buf.body.Bytes())
	if err != nil {
		return fmt.Errorf("store idempotent response: %w", err)
	}
	if tag.RowsAffected() == 0 {
		// Our claim was taken over after its lease: the other request
		// owns the key now, and our effects must not commit.
		return ErrIdempotencyKeyInUse
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	committed = true
	for _, fn := range r.afterCommit {
		fn()
	}
	answer(status)
	return nil
}

// flush writes a buffered answer to the client.
func flush(w http.ResponseWriter, buf *bufferedWriter, status int) {
	for k, v := range buf.header {
		w.Header()[k] = v
	}
	w.WriteHeader(status)
	_, _ = w.Write(buf.body.Bytes())
}

// bufferedWriter holds a handler's answer until its transaction commits.
type bufferedWriter struct {
	header http.Header
	body   bytes.Buffer
}

func (b *bufferedWriter) Header() http.Header         { return b.header }
func (b *bufferedWriter) Write(p []byte) (int, error) { return b.body.Write(p) }
func (b *bufferedWriter) WriteHeader(int)             {}

// claim takes the key for this request, or returns the finished key's
// stored response. It fails with ErrIdempotencyKeyInUse and
// ErrIdempotencyKeyReused.
func (s *Server) claim(ctx context.Context, identity, key string, fp []byte, method, path string) (token []byte, stored *storedResponse, err error) {
	token = make([]byte, 16)
	if _, err := rand.Read(token); err != nil {
		return nil, nil, fmt.Errorf("claim token: %w", err)
	}
	pool := s.config.Pool
	retentionSecs := jobs.IdempotencyKeyRetention.Seconds()
	// A few rounds at most: the row may vanish (released, purged) or expire
	// between our insert and our read, or be taken over by someone else.
	for range 5 {
		tag, err := pool.Exec(ctx, `
			INSERT INTO idempotency_keys AS k (identity, key, fingerprint, method, path, claim_token)
			VALUES ($1, $2, $3, $4, $5, $6)
			ON CONFLICT (identity, key) DO UPDATE SET
				fingerprint = excluded.fingerprint, method = excluded.method, path = excluded.path,
				claim_token = excluded.claim_token, created_at = now(), claimed_at = now(),
				completed_at = NULL, response_status = NULL, response_type = NULL,
				response_location = NULL, response_body = NULL
			WHERE k.created_at < now() - make_interval(secs => $7)`,
			identity, key, fp, method, path, token, retentionSecs)
		if err != nil {
			return nil, nil, fmt.Errorf("claim idempotency key: %w", err)
		}
		if tag.RowsAffected() == 1 {
			return token, nil, nil
		}
		var (
			have      []byte
			oldToken  []byte
			finished  bool
			expired   bool
			status    *int
			ctype     *string
			location  *string
			respBody  []byte
			leaseSecs = idempotencyLease.Seconds()
		)
		// A row past the window reads as absent: the next round's insert
		// replaces it.
		err = pool.QueryRow(ctx, `
			SELECT fingerprint, claim_token, completed_at IS NOT NULL,
				claimed_at < now() - make_interval(secs => $3),
				response_status, response_type, response_location, response_body
			FROM idempotency_keys
			WHERE identity = $1 AND key = $2 AND created_at >= now() - make_interval(secs => $4)`,
			identity, key, leaseSecs, retentionSecs).
			Scan(&have, &oldToken, &finished, &expired, &status, &ctype, &location, &respBody)
		if errors.Is(err, pgx.ErrNoRows) {
			continue
		}
		if err != nil {
			return nil, nil, fmt.Errorf("read idempotency key: %w", err)
		}
		if !bytes.Equal(have, fp) {
			return nil, nil, ErrIdempotencyKeyReused
		}
		if finished {
			st := &storedResponse{status: *status, body: respBody}
			if ctype != nil {
				st.contentType = *ctype
			}
			if location != nil {
				st.location = *location
			}
			return nil, st, nil
		}
		if !expired {
			return nil, nil, ErrIdempotencyKeyInUse
		}
		tag, err = pool.Exec(ctx, `
			UPDATE idempotency_keys SET claim_token = $4, claimed_at = now()
			WHERE identity = $1 AND key = $2 AND claim_token = $3 AND completed_at IS NULL
			  AND claimed_at < now() - make_interval(secs => $5)`,
			identity, key, oldToken, token, leaseSecs)
		if err != nil {
			return nil, nil, fmt.Errorf("take over idempotency key: %w", err)
		}
		if tag.RowsAffected() == 1 {
			return token, nil, nil
		}
	}
	return nil, nil, ErrIdempotencyKeyInUse
}

// release frees a claim whose request changed nothing.
func (s *Server) release(ctx context.Context, identity, key string, token []byte) {
	_, err := s.config.Pool.Exec(ctx, `
		DELETE FROM idempotency_keys
		WHERE identity = $1 AND key = $2 AND claim_token = $3 AND completed_at IS NULL`,
		identity, key, token)
	if err != nil {
		// The lease frees it later.
		s.config.Logger.ErrorContext(ctx, "release idempotency key", "error", err.Error())
	}
}
