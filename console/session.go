package console

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/labstack/echo/v4"
)

// Sessions live in PostgreSQL (console_sessions), so that any instance
// serves them and a restart keeps them. The browser's cookie holds a random
// id; the row is keyed by its SHA-256. A token session's row holds the
// SHA-256 of the operator's token, which Config.Tokens turns back into the
// token at each request; a person's holds no token, but whom the company's
// identity provider (issuer) signed in (subject, email), and the console
// calls the API as that person (api.WithPerson). The CSRF token is derived
// from the cookie's id (csrfToken), so no key has to be shared between
// instances.

type session struct {
	idHash []byte
	// token is a token session's role token; "" for a person's.
	token string
	// name is whom the header and the audit log name: a named token's
	// operator, a person's email else subject.
	name string
	// person: signed in by the identity provider issuer as subject.
	person          bool
	issuer, subject string
	email           string
	// ops: the API lets the token read the ops routes; finance: start
	// reconciliation runs. Reading the runs is not a role's: the pages ask
	// the API and show its answer.
	ops     bool
	finance bool
	expires time.Time
	flash   []message // as read with the session, and added since
}

// storeTimeout bounds one session query.
const storeTimeout = 5 * time.Second

func storeContext(ec echo.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ec.Request().Context()), storeTimeout)
}

func sha(b []byte) []byte {
	h := sha256.Sum256(b)
	return h[:]
}

// errNoSession: the cookie names no live session.
var errNoSession = errors.New("no session")

// sessionOf reads the session the request's cookie names: errNoSession
// when there is none (no cookie, unknown, expired, a token session whose
// token is no longer configured or while token sign-in is off, a person's
// from a provider no longer configured: that row is deleted), another error
// when the table cannot be read.
func (c *Console) sessionOf(ec echo.Context) (*session, error) {
	ck, err := ec.Cookie(cookieName)
	if err != nil || ck.Value == "" {
		return nil, errNoSession
	}
	ctx, cancel := storeContext(ec)
	defer cancel()
	s := &session{idHash: sha([]byte(ck.Value))}
	var tokenHash []byte
	var flash []byte
	var issuer, subject, email *string
	err = c.cfg.Pool.QueryRow(ctx, `SELECT token_hash, ops, finance, name, flash, expires_at, issuer, subject, email
		FROM console_sessions WHERE id_hash = $1 AND expires_at > now()`, s.idHash).
		Scan(&tokenHash, &s.ops, &s.finance, &s.name, &flash, &s.expires, &issuer, &subject, &email)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, errNoSession
	}
	if err != nil {
		return nil, err
	}
	var ok bool
	switch {
	case tokenHash == nil && issuer != nil && subject != nil:
		s.person, s.issuer, s.subject = true, *issuer, *subject
		if email != nil {
			s.email = *email
		}
		ok = c.cfg.SignIn != nil && c.cfg.SignIn.Issuer() == s.issuer
	case len(tokenHash) == 32 && !c.cfg.DisableTokens:
		s.token, ok = c.cfg.Tokens([32]byte(tokenHash))
	}
	if !ok {
		if _, err := c.cfg.Pool.Exec(ctx, `DELETE FROM console_sessions WHERE id_hash = $1`, s.idHash); err != nil {
			return nil, err
		}
		return nil, errNoSession
	}
	if err := json.Unmarshal(flash, &s.flash); err != nil {
		s.flash = nil
	}
	return s, nil
}

// startSession stores s under a fresh id (never one the browser brought: no
// fixation) and sets its cookie. Expired sessions are deleted meanwhile.
func (c *Console) startSession(ec echo.Context, s *session) error {
	id := randomID(32)
	s.idHash = sha([]byte(id))
	ctx, cancel := storeContext(ec)
	defer cancel()
	var tokenHash []byte
	var issuer, subject, email *string
	if s.person {
		issuer, subject = &s.issuer, &s.subject
		if s.email != "" {
			email = &s.email
		}
	} else {
		tokenHash = sha([]byte(s.token))
	}
	err := c.cfg.Pool.QueryRow(ctx, `INSERT INTO console_sessions (id_hash, token_hash, ops, finance, name, expires_at, issuer, subject, email)
		VALUES ($1, $2, $3, $4, $5, now() + $6, $7, $8, $9) RETURNING expires_at`,
		s.idHash, tokenHash, s.ops, s.finance, s.name, c.cfg.SessionTTL, issuer, subject, email).Scan(&s.expires)
	if err != nil {
		return err
	}
	if _, err := c.cfg.Pool.Exec(ctx, `DELETE FROM console_sessions WHERE expires_at <= now()`); err != nil {
		c.cfg.Logger.Warn("console: delete expired sessions", "error", err.Error())
	}
	ec.SetCookie(&http.Cookie{
		Name: cookieName, Value: id, Path: basePath, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: ec.Scheme() == "https",
		Expires: s.expires,
	})
	return nil
}

// regrant applies what a person's sign-in just said about their roles to
// their other sessions: new roles there too, and with none, those sessions
// end. (Sessions are never longer than SessionTTL in any case.)
func (c *Console) regrant(ec echo.Context, issuer, subject string, ops, finance bool) error {
	ctx, cancel := storeContext(ec)
	defer cancel()
	var err error
	if ops || finance {
		_, err = c.cfg.Pool.Exec(ctx, `UPDATE console_sessions SET ops = $3, finance = $4
			WHERE issuer = $1 AND subject = $2 AND (ops, finance) IS DISTINCT FROM ($3, $4)`, issuer, subject, ops, finance)
	} else {
		_, err = c.cfg.Pool.Exec(ctx, `DELETE FROM console_sessions WHERE issuer = $1 AND subject = $2`, issuer, subject)
	}
	return err
}

// endSession deletes the session's row, which ends it on every instance,
// and the browser's cookie.
func (c *Console) endSession(ec echo.Context) error {
	if ck, err := ec.Cookie(cookieName); err == nil {
		ctx, cancel := storeContext(ec)
		defer cancel()
		h := sha([]byte(ck.Value))
		if _, err := c.cfg.Pool.Exec(ctx, `DELETE FROM console_sessions WHERE id_hash = $1`, h); err != nil {
			return err
		}
		c.mu.Lock()
		delete(c.secrets, string(h))
		c.mu.Unlock()
	}
	ec.SetCookie(&http.Cookie{Name: cookieName, Value: "", Path: basePath, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: ec.Scheme() == "https", MaxAge: -1})
	return nil
}

// csrfToken binds a form to the session: an HMAC keyed by the session's
// cookie id, which only that browser and no table holds, so nothing more is
// stored or shared between instances, and another session's token does
// not verify.
func (c *Console) csrfToken(ec echo.Context) string {
	ck, err := ec.Cookie(cookieName)
	if err != nil || ck.Value == "" {
		return ""
	}
	m := hmac.New(sha256.New, []byte(ck.Value))
	m.Write([]byte("paygate console csrf"))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// addFlash keeps a message for the next page, which may be served by
// another instance: the last five are kept in the session's row.
func (c *Console) addFlash(s *session, kind, text string) {
	m := message{Kind: kind, Text: text}
	s.flash = append(s.flash, m)
	raw, _ := json.Marshal([]message{m})
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	_, err := c.cfg.Pool.Exec(ctx, `UPDATE console_sessions SET flash = (
			SELECT coalesce(jsonb_agg(m ORDER BY i), '[]'::jsonb)
			FROM jsonb_array_elements(flash || $2::jsonb) WITH ORDINALITY AS t(m, i)
			WHERE i > jsonb_array_length(flash || $2::jsonb) - 5)
		WHERE id_hash = $1`, s.idHash, raw)
	if err != nil {
		c.cfg.Logger.Warn("console: keep a message", "error", err.Error())
	}
}

// takeFlash hands out the messages waiting for the session's next page and
// forgets them; only a session that had some reaches the table.
func (c *Console) takeFlash(s *session) []message {
	if len(s.flash) == 0 {
		return nil
	}
	shown := s.flash
	s.flash = nil
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	var raw []byte
	err := c.cfg.Pool.QueryRow(ctx, `UPDATE console_sessions s SET flash = '[]'
		FROM (SELECT id_hash, flash FROM console_sessions WHERE id_hash = $1 FOR UPDATE) old
		WHERE s.id_hash = old.id_hash RETURNING old.flash`, s.idHash).Scan(&raw)
	if err != nil {
		if !errors.Is(err, pgx.ErrNoRows) {
			c.cfg.Logger.Warn("console: take messages", "error", err.Error())
		}
		return shown
	}
	var stored []message
	if json.Unmarshal(raw, &stored) == nil && len(stored) > 0 {
		return stored
	}
	return shown
}
