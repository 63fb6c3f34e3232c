// Package stdwebhooks is paygate's adapter for Standard Webhooks
// (standardwebhooks.com), the scheme Svix, Polar, Dodo Payments and others
// sign their deliveries with. Each configured source is its own inbox
// provider, named after the source: its events are filed under the
// webhook-id header and arrive at POST /webhooks/standard/{source}.
//
// It owns the scheme's symmetric signature (v1: HMAC-SHA256 over
// "<webhook-id>.<webhook-timestamp>.<body>"), the parsing of the sources'
// configuration, and turning one authentic request into one event. The
// payloads of these senders have no shape in common, so their events are
// stored and shown to ops, never mapped to payments or money.
//
// It must never know a particular sender's payload, claim the name of
// another provider, do I/O, or put a secret, a signature or a payload in
// an error.
package stdwebhooks

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/paygate/paygate/provider"
	"github.com/paygate/paygate/strictjson"
)

// ErrInvalidSource: a source's configuration is unusable (a name that is
// not a valid source name or is reserved, no secret, an entry that is not
// name=secret).
var ErrInvalidSource = errors.New("invalid Standard Webhooks source")

// reserved are the inbox names of the providers paygate maps itself: a
// source by one of those names would file its events among theirs, where
// their mapper would read them.
var reserved = []string{"stripe", "adyen"}

// maxNameLength bounds a source name: it is a path segment and the inbox's
// provider name.
const maxNameLength = 63

// Source is one configured sender: its name, which is also its inbox
// provider name and its path segment, and the secrets ("whsec_…") its
// requests may be signed with (several during a rotation).
type Source struct {
	Name    string
	Secrets []string
}

// ParseSources reads PAYGATE_STANDARD_WEBHOOK_SOURCES: comma-separated
// "name=whsec_…" entries. A name given twice is one source with both
// secrets (a rotation). Sources come in the order their names first appear,
// secrets in the order given; blanks around entries, names and secrets are
// ignored, as are empty entries. An empty env is no source.
//
// It fails with an error wrapping ErrInvalidSource (an entry without '=', a
// name that is empty, not [a-z0-9][a-z0-9_-]{0,62}, or reserved: "stripe",
// "adyen") or ErrInvalidSecret. Errors name the entry by its position and,
// once its name is valid, the source; never a secret, nor an invalid name
// (it may be a secret pasted in the wrong place).
func ParseSources(env string) ([]Source, error) {
	var sources []Source
	index := map[string]int{}
	for i, entry := range strings.Split(env, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		name, secret, ok := strings.Cut(entry, "=")
		if !ok {
			return nil, fmt.Errorf("%w: entry %d is not name=secret", ErrInvalidSource, i+1)
		}
		name, secret = strings.TrimSpace(name), strings.TrimSpace(secret)
		if err := checkName(name); err != nil {
			return nil, fmt.Errorf("entry %d: %w", i+1, err)
		}
		if _, err := ParseSecret(secret); err != nil {
			return nil, fmt.Errorf("entry %d, source %q: %w", i+1, name, err)
		}
		j, seen := index[name]
		if !seen {
			j = len(sources)
			index[name] = j
			sources = append(sources, Source{Name: name})
		}
		sources[j].Secrets = append(sources[j].Secrets, secret)
	}
	return sources, nil
}

// checkName refuses what cannot be a source name, without showing it.
func checkName(name string) error {
	if name == "" {
		return fmt.Errorf("%w: empty source name", ErrInvalidSource)
	}
	valid := len(name) <= maxNameLength && isNameStart(name[0])
	for i := 1; i < len(name) && valid; i++ {
		valid = isNameStart(name[i]) || name[i] == '_' || name[i] == '-'
	}
	if !valid {
		return fmt.Errorf("%w: a source name is [a-z0-9][a-z0-9_-]{0,62}", ErrInvalidSource)
	}
	for _, r := range reserved {
		if name == r {
			return fmt.Errorf("%w: source name %q is reserved for that provider", ErrInvalidSource, name)
		}
	}
	return nil
}

func isNameStart(c byte) bool { return 'a' <= c && c <= 'z' || '0' <= c && c <= '9' }

// Receiver authenticates the requests of one source and decodes their one
// event each.
type Receiver struct {
	name string
	keys [][]byte
}

var _ provider.Receiver = (*Receiver)(nil)

// NewReceiver returns the Receiver of src, accepting any of its secrets
// with a timestamp within provider.DefaultTolerance of now, both ways.
//
// It fails with an error wrapping ErrInvalidSource (the name is invalid or
// reserved, as ParseSources has it; no secret) or ErrInvalidSecret.
func NewReceiver(src Source) (*Receiver, error) {
	if err := checkName(src.Name); err != nil {
		return nil, err
	}
	if len(src.Secrets) == 0 {
		return nil, fmt.Errorf("%w: source %q has no secret", ErrInvalidSource, src.Name)
	}
	keys := make([][]byte, 0, len(src.Secrets))
	for i, s := range src.Secrets {
		key, err := ParseSecret(s)
		if err != nil {
			return nil, fmt.Errorf("source %q, secret %d: %w", src.Name, i+1, err)
		}
		keys = append(keys, key)
	}
	return &Receiver{name: src.Name, keys: keys}, nil
}

// Name implements provider.Receiver: the source's name.
func (r *Receiver) Name() string { return r.name }

// Receive implements provider.Receiver: Verify, then the event. Its id is
// webhook-id, its Created webhook-timestamp, its Type the body's top-level
// "type" when that is a string of at most provider.MaxIDLength bytes (else
// empty: the scheme does not require one), its Payload the body.
//
// The signature is checked before the body is read, so an unauthenticated
// sender learns nothing of how paygate parses. It fails with the errors of
// Verify (a header given twice is provider.ErrMalformedSignature: a proxy
// might read the other one), then with provider.ErrNotAnEvent when
// webhook-id is longer than provider.MaxIDLength or holds a control
// character or invalid UTF-8, when webhook-timestamp is outside
// strictjson's window (also wrapping strictjson.ErrTimestampOutOfRange), or
// when the body is not a JSON object strictjson accepts (also wrapping its
// sentinel).
func (r *Receiver) Receive(header http.Header, body []byte, now time.Time) ([]provider.Event, error) {
	id, err := single(header, HeaderID)
	if err != nil {
		return nil, err
	}
	timestamp, err := single(header, HeaderTimestamp)
	if err != nil {
		return nil, err
	}
	signature, err := single(header, HeaderSignature)
	if err != nil {
		return nil, err
	}
	ts, err := Verify(id, timestamp, signature, body, r.keys, now, provider.DefaultTolerance)
	if err != nil {
		return nil, err
	}
	if err := checkID(id); err != nil {
		return nil, err
	}
	created, err := strictjson.ValidUnix(ts.Unix())
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", provider.ErrNotAnEvent, HeaderTimestamp, err)
	}
	typ, err := eventType(body)
	if err != nil {
		return nil, err
	}
	return []provider.Event{{
		Provider: r.name,
		ID:       id,
		Type:     typ,
		Created:  created,
		Payload:  body,
	}}, nil
}

// single is the one value of a header, or "" when it is absent.
func single(header http.Header, key string) (string, error) {
	switch vs := header.Values(key); len(vs) {
	case 0:
		return "", nil
	case 1:
		return vs[0], nil
	default:
		return "", fmt.Errorf("%w: %s given %d times", provider.ErrMalformedSignature, key, len(vs))
	}
}

// checkID refuses a webhook-id the inbox could not store or show as it is:
// PostgreSQL's text holds neither NUL nor invalid UTF-8, and a control
// character in an id forges lines in a log or a terminal.
func checkID(id string) error {
	if id == "" || len(id) > provider.MaxIDLength {
		return fmt.Errorf("%w: %s empty or longer than %d bytes", provider.ErrNotAnEvent, HeaderID, provider.MaxIDLength)
	}
	if !utf8.ValidString(id) {
		return fmt.Errorf("%w: %s is not UTF-8", provider.ErrNotAnEvent, HeaderID)
	}
	if strings.ContainsFunc(id, unicode.IsControl) {
		return fmt.Errorf("%w: %s holds a control character", provider.ErrNotAnEvent, HeaderID)
	}
	return nil
}

// eventType reads body as strictjson does, so that the worker, the event
// view and PostgreSQL's jsonb all read the object filed here, and returns
// its top-level "type" if that is a usable string.
func eventType(body []byte) (string, error) {
	var fields map[string]json.RawMessage
	if err := strictjson.Unmarshal(body, &fields); err != nil {
		return "", fmt.Errorf("%w: %w", provider.ErrNotAnEvent, err)
	}
	if fields == nil { // null decodes into a map without error
		return "", fmt.Errorf("%w: body is not a JSON object", provider.ErrNotAnEvent)
	}
	raw, ok := fields["type"]
	if !ok || len(raw) == 0 || raw[0] != '"' {
		return "", nil
	}
	var typ string
	if err := strictjson.Unmarshal(raw, &typ); err != nil {
		return "", fmt.Errorf("%w: %w", provider.ErrNotAnEvent, err)
	}
	if len(typ) > provider.MaxIDLength || strings.ContainsRune(typ, 0) {
		return "", nil
	}
	return typ, nil
}

// Acknowledgement is the body of the 200 answer.
type Acknowledgement = provider.Acknowledgement

// Acknowledge implements provider.Receiver: 200 application/json
// {"received":true,"duplicate":…}. Senders retry anything but a 2xx, so a
// duplicate is acknowledged like a first delivery.
func (r *Receiver) Acknowledge(_ []provider.Event, duplicate []bool) provider.Answer {
	return provider.Acknowledge(duplicate)
}
