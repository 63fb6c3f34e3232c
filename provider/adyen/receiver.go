package adyen

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/paygate/paygate/provider"
	"github.com/paygate/paygate/strictjson"
)

// Name is the inbox provider name of Adyen's events, and the last segment
// of their route: POST /webhooks/adyen.
const Name = "adyen"

// Acknowledgement is the body Adyen requires in the answer to a batch it
// should not send again; anything else and it retries the whole batch.
const Acknowledgement = "[accepted]"

// Config configures a Receiver.
type Config struct {
	// HMACKeys are the raw keys (ParseKeys decodes them from hex); an
	// item's HMAC may match any. None: every request fails with
	// provider.ErrNotConfigured.
	HMACKeys [][]byte
	// BasicAuth is "user:password": when set, a request must carry it as
	// its Basic Authorization, as Adyen sends it when the webhook is
	// configured with a user name and password.
	BasicAuth string
}

// Receiver authenticates and decodes Adyen's standard webhook requests.
type Receiver struct {
	keys [][]byte
	// basicAuth is the SHA-256 of "user:password", so the comparison takes
	// the same time whatever the length of what the request sent.
	basicAuth *[sha256.Size]byte
}

var _ provider.Receiver = (*Receiver)(nil)

// NewReceiver returns a Receiver for cfg. It keeps its own copy of the
// keys.
//
// It fails with an error wrapping ErrInvalidConfig when a key is empty or
// BasicAuth has no ':' or an empty user.
func NewReceiver(cfg Config) (*Receiver, error) {
	r := &Receiver{}
	for i, k := range cfg.HMACKeys {
		if len(k) == 0 {
			return nil, fmt.Errorf("%w: HMAC key %d of %d is empty", ErrInvalidConfig, i+1, len(cfg.HMACKeys))
		}
		r.keys = append(r.keys, append([]byte(nil), k...))
	}
	if cfg.BasicAuth != "" {
		user, _, ok := strings.Cut(cfg.BasicAuth, ":")
		if !ok || user == "" {
			return nil, fmt.Errorf("%w: Basic auth is not \"user:password\"", ErrInvalidConfig)
		}
		sum := sha256.Sum256([]byte(cfg.BasicAuth))
		r.basicAuth = &sum
	}
	return r, nil
}

// Name implements provider.Receiver.
func (r *Receiver) Name() string { return Name }

// batch is the envelope of a request. The items stay raw: each event's
// payload is its item's bytes exactly as sent.
type batch struct {
	Live              string `json:"live"`
	NotificationItems []struct {
		NotificationRequestItem json.RawMessage `json:"NotificationRequestItem"`
	} `json:"notificationItems"`
}

// Receive implements provider.Receiver. It returns one event per item, in
// the batch's order: ID EventID(item), Type its eventCode, Created its
// eventDate, Livemode the batch's live flag, Payload the item's
// NotificationRequestItem object byte for byte as in body.
//
// Adyen answers a refusal by sending the same batch again, so the batch is
// all or nothing: one bad item refuses every item. The request is
// authenticated, Basic auth first and then every item's HMAC, before any
// field the HMAC does not cover is looked at; the body must be strict JSON
// (strictjson) even to find those fields.
//
// It fails with provider.ErrNotConfigured (no key); an error wrapping
// provider.ErrUnauthenticated for a missing or wrong Basic Authorization
// when one is configured, or an item whose HMAC is missing or matches no
// key (naming the item's index); or one wrapping provider.ErrNotAnEvent
// (and the strictjson sentinel where there is one) when body is not a
// batch of Adyen's shape: not strict JSON, no items, an item that is not an
// object or fails Validate, live not "true" or "false". Errors never hold
// a key, a signature or a field's value.
func (r *Receiver) Receive(header http.Header, body []byte, _ time.Time) ([]provider.Event, error) {
	if len(r.keys) == 0 {
		return nil, provider.ErrNotConfigured
	}
	if r.basicAuth != nil {
		if err := r.checkBasicAuth(header); err != nil {
			return nil, err
		}
	}
	var b batch
	if err := strictjson.Unmarshal(body, &b); err != nil {
		return nil, fmt.Errorf("%w: %w", provider.ErrNotAnEvent, err)
	}
	if len(b.NotificationItems) == 0 {
		return nil, fmt.Errorf("%w: no notificationItems", provider.ErrNotAnEvent)
	}
	items := make([]Item, len(b.NotificationItems))
	for i, w := range b.NotificationItems {
		it, err := decodeItemJSON(w.NotificationRequestItem)
		if err != nil {
			return nil, fmt.Errorf("item %d: %w", i, err)
		}
		items[i] = it
	}
	for i, it := range items {
		if err := Verify(it, r.keys); err != nil {
			return nil, fmt.Errorf("item %d: %w", i, err)
		}
	}

	var live bool
	switch b.Live {
	case "true":
		live = true
	case "false":
	default:
		return nil, fmt.Errorf("%w: live is not \"true\" or \"false\"", provider.ErrNotAnEvent)
	}
	events := make([]provider.Event, len(items))
	for i, it := range items {
		if err := it.Validate(); err != nil {
			return nil, fmt.Errorf("item %d: %w", i, err)
		}
		created, _ := it.EventTime() // Validate checked it
		events[i] = provider.Event{
			Provider: Name,
			ID:       EventID(it),
			Type:     it.EventCode,
			Livemode: live,
			Created:  created,
			// RawMessage holds a copy of the item's bytes as sent, so the
			// payload neither aliases body nor is re-encoded.
			Payload: b.NotificationItems[i].NotificationRequestItem,
		}
	}
	return events, nil
}

func (r *Receiver) checkBasicAuth(header http.Header) error {
	vals := header.Values("Authorization")
	if len(vals) == 0 {
		return fmt.Errorf("%w: no Basic Authorization", provider.ErrUnauthenticated)
	}
	var got []byte
	if len(vals) == 1 {
		scheme, cred, ok := strings.Cut(strings.TrimSpace(vals[0]), " ")
		if ok && strings.EqualFold(scheme, "Basic") {
			got, _ = base64.StdEncoding.DecodeString(strings.TrimSpace(cred))
		}
	}
	sum := sha256.Sum256(got)
	if len(got) == 0 || subtle.ConstantTimeCompare(sum[:], r.basicAuth[:]) != 1 {
		return fmt.Errorf("%w: Basic Authorization does not match", provider.ErrUnauthenticated)
	}
	return nil
}

// Acknowledge implements provider.Receiver: 200, text/plain, "[accepted]",
// the answer Adyen requires whether or not the items were new.
func (r *Receiver) Acknowledge(_ []provider.Event, _ []bool) provider.Answer {
	return provider.Answer{Status: http.StatusOK, ContentType: "text/plain", Body: []byte(Acknowledgement)}
}
