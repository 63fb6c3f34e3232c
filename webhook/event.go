package webhook

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// Event is what the inbox needs to know of a provider event. The payload is
// kept byte for byte as received; everything else is decoded from it.
type Event struct {
	Provider   string
	ID         string
	Type       string
	Livemode   bool
	APIVersion string
	Created    time.Time
	Payload    []byte
}

// maxIDLength bounds identifiers we store and index; Stripe's are ~30 chars.
const maxIDLength = 255

// DecodeStripeEvent reads the envelope fields of a Stripe event. Only the
// fields paygate needs are decoded, so an account pinned to another API
// version is never refused for it.
//
// It fails with ErrNotAnEvent when the body is not JSON, not an object of
// type "event", or lacks an id, type or data.object.
func DecodeStripeEvent(payload []byte) (Event, error) {
	var env struct {
		ID         string `json:"id"`
		Object     string `json:"object"`
		Type       string `json:"type"`
		Created    int64  `json:"created"`
		Livemode   bool   `json:"livemode"`
		APIVersion string `json:"api_version"`
		Data       struct {
			Object json.RawMessage `json:"object"`
		} `json:"data"`
	}
	if err := json.Unmarshal(payload, &env); err != nil {
		return Event{}, fmt.Errorf("%w: %s", ErrNotAnEvent, jsonProblem(err))
	}
	switch {
	case env.Object != "event":
		return Event{}, fmt.Errorf("%w: object is not \"event\"", ErrNotAnEvent)
	case env.ID == "" || len(env.ID) > maxIDLength:
		return Event{}, fmt.Errorf("%w: missing or oversized id", ErrNotAnEvent)
	case env.Type == "" || len(env.Type) > maxIDLength:
		return Event{}, fmt.Errorf("%w: missing or oversized type", ErrNotAnEvent)
	case len(env.APIVersion) > maxIDLength:
		return Event{}, fmt.Errorf("%w: oversized api_version", ErrNotAnEvent)
	case !isJSONObject(env.Data.Object):
		return Event{}, fmt.Errorf("%w: data.object is not an object", ErrNotAnEvent)
	case strings.ContainsRune(env.ID+env.Type+env.APIVersion, 0):
		// PostgreSQL text cannot hold NUL: storing it would fail the
		// commit, answered 503, and the provider would retry forever.
		return Event{}, fmt.Errorf("%w: NUL character in id, type or api_version", ErrNotAnEvent)
	}
	e := Event{
		Provider:   ProviderStripe,
		ID:         env.ID,
		Type:       env.Type,
		Livemode:   env.Livemode,
		APIVersion: env.APIVersion,
		Payload:    payload,
	}
	if env.Created > 0 {
		e.Created = time.Unix(env.Created, 0).UTC()
	}
	return e, nil
}

func isJSONObject(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) > 0 && raw[0] == '{'
}

// jsonProblem describes a decoding error without echoing the body back.
func jsonProblem(err error) string {
	switch e := err.(type) {
	case *json.SyntaxError:
		return fmt.Sprintf("invalid JSON at byte %d", e.Offset)
	case *json.UnmarshalTypeError:
		return fmt.Sprintf("field %q has the wrong type", e.Field)
	default:
		return "invalid JSON"
	}
}
