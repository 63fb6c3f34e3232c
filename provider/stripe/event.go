package stripe

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/paygate/paygate/provider"
	"github.com/paygate/paygate/strictjson"
)

// DecodeEvent reads the envelope fields of a Stripe event. Only the
// fields paygate needs are decoded, so an account pinned to another API
// version is never refused for it; but the whole body must read the same to
// every reader (strictjson): the raw payload is what the worker, the event
// view and PostgreSQL's jsonb read later, so the id and type filed here must
// be theirs.
//
// It fails with provider.ErrNotAnEvent when the body is not JSON or not an event of
// Stripe's shape: not an object of type "event"; an id or type missing,
// oversized or holding NUL; data.object not an object; created missing or
// outside strictjson's sane window (that error also wraps
// strictjson.ErrTimestampOutOfRange); or, anywhere in the body, a key
// twice, a key naming an envelope field in another case ("ID", "Data"),
// text that is not UTF-8 (lone surrogate escapes included), NUL, nesting
// deeper than strictjson.MaxDepth or a number beyond its range (each error
// also wraps the strictjson sentinel).
func DecodeEvent(payload []byte) (provider.Event, error) {
	var env struct {
		ID         string `json:"id"`
		Object     string `json:"object"`
		Type       string `json:"type"`
		Created    *int64 `json:"created"`
		Livemode   bool   `json:"livemode"`
		APIVersion string `json:"api_version"`
		Data       struct {
			Object json.RawMessage `json:"object"`
		} `json:"data"`
	}
	if err := strictjson.Unmarshal(payload, &env); err != nil {
		return provider.Event{}, fmt.Errorf("%w: %w", provider.ErrNotAnEvent, err)
	}
	switch {
	case env.Object != "event":
		return provider.Event{}, fmt.Errorf("%w: object is not \"event\"", provider.ErrNotAnEvent)
	case env.ID == "" || len(env.ID) > provider.MaxIDLength:
		return provider.Event{}, fmt.Errorf("%w: missing or oversized id", provider.ErrNotAnEvent)
	case env.Type == "" || len(env.Type) > provider.MaxIDLength:
		return provider.Event{}, fmt.Errorf("%w: missing or oversized type", provider.ErrNotAnEvent)
	case len(env.APIVersion) > provider.MaxIDLength:
		return provider.Event{}, fmt.Errorf("%w: oversized api_version", provider.ErrNotAnEvent)
	case !isJSONObject(env.Data.Object):
		return provider.Event{}, fmt.Errorf("%w: data.object is not an object", provider.ErrNotAnEvent)
	case env.Created == nil:
		// A missing created would date the event, and whatever the books
		// derive from it, nowhere (or at 1970).
		return provider.Event{}, fmt.Errorf("%w: created is missing", provider.ErrNotAnEvent)
	}
	// Out of the window it is either unstorable (PostgreSQL would refuse
	// the commit: a 503 on every retry, for days) or a date no ledger
	// transaction may carry.
	created, err := strictjson.ValidUnix(*env.Created)
	if err != nil {
		return provider.Event{}, fmt.Errorf("%w: created: %w", provider.ErrNotAnEvent, err)
	}
	return provider.Event{
		Provider:   Name,
		ID:         env.ID,
		Type:       env.Type,
		Livemode:   env.Livemode,
		APIVersion: env.APIVersion,
		Created:    created,
		Payload:    payload,
	}, nil
}

func isJSONObject(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) > 0 && raw[0] == '{'
}
