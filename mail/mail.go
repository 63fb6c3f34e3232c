// Package mail owns SMTP delivery: it turns a rendered message into one SMTP
// transaction with github.com/wneessen/go-mail, and classifies what the
// server answered. It must never know about payments, templates or the
// outbox; jobs/ decides what to send and when.
//
// What "once" means for SMTP. SMTP has no idempotency key: after the server
// accepted a message (250 after DATA) and before the caller recorded that,
// a crash, a timeout on the final reply or a lost database commit leaves the
// caller unable to know whether the message left, and it sends again. So
// delivery is at-least-once. Every message carries a Message-ID that the
// caller derives from its own stable key (never random), so a resend is
// byte-for-byte the same message with the same Message-ID, which mail
// clients, archives and de-duplicating relays recognise as one message.
// Duplicates are rare (only a crash in that window causes one) and
// recognisable; losing an email silently is not an option.
package mail

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	netmail "net/mail"
	"net/url"
	"strconv"
	"strings"
	"time"

	gomail "github.com/wneessen/go-mail"
)

// DefaultTimeout bounds connecting and each SMTP command.
const DefaultTimeout = 30 * time.Second

// ErrRejected matches (errors.Is) an *Error the server answered with a
// permanent 5xx reply: sending the same message again cannot succeed.
// Every other failure (connection refused, timeouts, 4xx) is transient.
var ErrRejected = errors.New("rejected by the SMTP server")

// ErrInvalidURL is returned by New for an unusable SMTP URL.
var ErrInvalidURL = errors.New("invalid SMTP URL")

// ErrInvalidMessage is returned by Send for a message that cannot be built
// (an unparseable address, a missing body); it is permanent too.
var ErrInvalidMessage = errors.New("invalid message")

// Config configures a Sender.
type Config struct {
	// URL is smtp://[user:pass@]host[:port] (STARTTLS when the server offers
	// it; port 25 by default) or smtps://[user:pass@]host[:port] (TLS from
	// the first byte; port 465 by default). With a user, SMTP AUTH uses the
	// best mechanism the server offers, and never a clear-text password
	// over an unencrypted connection.
	URL string
	// Timeout bounds the connection and each SMTP command; default
	// DefaultTimeout.
	Timeout time.Duration
	// RootCAs verifies the server's certificate (STARTTLS or smtps); nil
	// uses the system's roots. Certificates are always verified.
	RootCAs *x509.CertPool
}

// Sender sends messages over SMTP; safe for concurrent use. Each Send is
// its own connection: paygate sends a handful of messages a minute, and a
// fresh connection never inherits a half-broken session.
type Sender struct {
	host    string
	opts    []gomail.Option
	timeout time.Duration
}

// New returns a Sender for config.URL.
//
// It fails with ErrInvalidURL.
func New(config Config) (*Sender, error) {
	u, err := url.Parse(config.URL)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidURL, redactURLError(err))
	}
	timeout := config.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	opts := []gomail.Option{gomail.WithTimeout(timeout)}
	var port int
	switch u.Scheme {
	case "smtp":
		port = 25
		opts = append(opts, gomail.WithTLSPolicy(gomail.TLSOpportunistic))
	case "smtps":
		port = 465
		opts = append(opts, gomail.WithSSL())
	default:
		return nil, fmt.Errorf("%w: scheme %q (want smtp or smtps)", ErrInvalidURL, u.Scheme)
	}
	host := u.Hostname()
	if host == "" {
		return nil, fmt.Errorf("%w: no host", ErrInvalidURL)
	}
	if p := u.Port(); p != "" {
		port, err = strconv.Atoi(p)
		if err != nil || port < 1 || port > 65535 {
			return nil, fmt.Errorf("%w: port %q", ErrInvalidURL, p)
		}
	}
	opts = append(opts, gomail.WithPort(port),
		gomail.WithTLSConfig(&tls.Config{ServerName: host, RootCAs: config.RootCAs, MinVersion: tls.VersionTLS12}))
	// With a user, SMTP AUTH picks the best mechanism the server offers;
	// go-mail never sends a password in clear (PLAIN, LOGIN) over a
	// connection that is not encrypted: that fails, and is retried.
	if u.User != nil && u.User.Username() != "" {
		pass, _ := u.User.Password()
		opts = append(opts,
			gomail.WithSMTPAuth(gomail.SMTPAuthAutoDiscover),
			gomail.WithUsername(u.User.Username()),
			gomail.WithPassword(pass))
	}
	// Build one client now so that a bad option fails at start-up, not at
	// the first email.
	if _, err := gomail.NewClient(host, opts...); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidURL, err)
	}
	return &Sender{host: host, opts: opts, timeout: timeout}, nil
}

// Message is one email to one recipient.
type Message struct {
	From    string // an address, optionally with a display name
	To      string // one address
	Subject string
	Text    string // text/plain body (required)
	HTML    string // text/html alternative (optional)
	// MessageID is the Message-ID header without angle brackets, e.g.
	// "payment_receipt.pi_123@paygate". Callers derive it from a stable
	// key so that a resend carries the same one.
	MessageID string
}

// Error is an SMTP failure, with the server's reply code when there was
// one. Its text never contains the recipient's full address.
type Error struct {
	Code      int    // the SMTP reply code (e.g. 550, 451), 0 when the server gave none
	Permanent bool   // a 5xx reply: errors.Is(err, ErrRejected)
	Detail    string // what failed, the recipient's address redacted
}

func (e *Error) Error() string {
	if e.Code != 0 {
		return fmt.Sprintf("smtp %d: %s", e.Code, e.Detail)
	}
	return "smtp: " + e.Detail
}

// Is makes a permanent Error match ErrRejected.
func (e *Error) Is(target error) bool { return target == ErrRejected && e.Permanent }

// Send delivers m in one SMTP transaction, bounded by ctx and the
// configured timeout.
//
// It fails with an *Error: errors.Is(err, ErrRejected) when the server
// refused the message permanently (5xx), and with ErrInvalidMessage when
// the message cannot be built; any other failure is transient and worth
// retrying later.
func (s *Sender) Send(ctx context.Context, m Message) error {
	msg, err := build(m)
	if err != nil {
		return err
	}
	client, err := gomail.NewClient(s.host, s.opts...)
	if err != nil {
		return &Error{Detail: "client: " + err.Error()}
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	if err := client.DialAndSendWithContext(ctx, msg); err != nil {
		return classify(err, m.To)
	}
	return nil
}

func build(m Message) (*gomail.Msg, error) {
	if m.Text == "" {
		return nil, fmt.Errorf("%w: empty body", ErrInvalidMessage)
	}
	if strings.ContainsAny(m.MessageID, "<>\r\n ") || !strings.Contains(m.MessageID, "@") {
		return nil, fmt.Errorf("%w: Message-ID %q", ErrInvalidMessage, m.MessageID)
	}
	msg := gomail.NewMsg()
	if err := msg.From(m.From); err != nil {
		return nil, fmt.Errorf("%w: from address: %v", ErrInvalidMessage, err)
	}
	if _, err := netmail.ParseAddress(m.To); err != nil {
		return nil, fmt.Errorf("%w: recipient %s: %v", ErrInvalidMessage, Redact(m.To), err)
	}
	if err := msg.To(m.To); err != nil {
		return nil, fmt.Errorf("%w: recipient %s", ErrInvalidMessage, Redact(m.To))
	}
	msg.Subject(strings.Join(strings.Fields(m.Subject), " ")) // no CR/LF: a subject never starts a header
	msg.SetMessageIDWithValue(m.MessageID)
	msg.SetDate()
	// RFC 3834: automatic mail; well-behaved auto-responders stay quiet.
	msg.SetGenHeader(gomail.Header("Auto-Submitted"), "auto-generated")
	msg.SetBodyString(gomail.TypeTextPlain, m.Text)
	if m.HTML != "" {
		msg.AddAlternativeString(gomail.TypeTextHTML, m.HTML)
	}
	return msg, nil
}

// classify keeps what the server said, minus the recipient's address
// (go-mail's SendError text lists affected recipients; ops logs must not).
func classify(err error, to string) *Error {
	detail := err.Error()
	if to != "" {
		detail = strings.ReplaceAll(detail, to, Redact(to))
	}
	var se *gomail.SendError
	if errors.As(err, &se) {
		code := se.ErrorCode()
		return &Error{Code: code, Permanent: code >= 500 && code <= 599, Detail: detail}
	}
	return &Error{Detail: detail}
}

// Redact shortens an address for logs: "jenny.rosen@example.com" →
// "j…@example.com". Anything that is not an address becomes "…".
func Redact(addr string) string {
	if a, err := netmail.ParseAddress(addr); err == nil {
		addr = a.Address
	}
	at := strings.LastIndex(addr, "@")
	if at < 1 {
		return "…"
	}
	r := []rune(addr[:at])
	return string(r[0]) + "…" + addr[at:]
}

func redactURLError(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err.Error() // the URL itself may hold a password
	}
	return "unparseable"
}
