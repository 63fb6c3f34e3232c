package stripesim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"
)

// EventType is a Stripe event type.
type EventType string

// The event types the simulator emits. EventCustomerCreated is one paygate
// has no use for.
const (
	EventPaymentIntentProcessing              EventType = "payment_intent.processing"
	EventPaymentIntentAmountCapturableUpdated EventType = "payment_intent.amount_capturable_updated"
	EventPaymentIntentSucceeded               EventType = "payment_intent.succeeded"
	EventPaymentIntentPaymentFailed           EventType = "payment_intent.payment_failed"
	EventPaymentIntentCanceled                EventType = "payment_intent.canceled"
	EventChargeSucceeded                      EventType = "charge.succeeded"
	EventChargeCaptured                       EventType = "charge.captured"
	EventChargeFailed                         EventType = "charge.failed"
	EventChargeRefunded                       EventType = "charge.refunded"
	EventChargeUpdated                        EventType = "charge.updated"
	EventChargeRefundUpdated                  EventType = "charge.refund.updated"
	EventRefundCreated                        EventType = "refund.created"
	EventRefundUpdated                        EventType = "refund.updated"
	EventRefundFailed                         EventType = "refund.failed"
	EventChargeDisputeCreated                 EventType = "charge.dispute.created"
	EventChargeDisputeFundsWithdrawn          EventType = "charge.dispute.funds_withdrawn"
	EventChargeDisputeFundsReinstated         EventType = "charge.dispute.funds_reinstated"
	EventChargeDisputeClosed                  EventType = "charge.dispute.closed"
	EventPayoutPaid                           EventType = "payout.paid"
	EventPayoutFailed                         EventType = "payout.failed"
	EventCustomerCreated                      EventType = "customer.created"
)

// Event is one emitted event.
type Event struct {
	ID      string
	Type    EventType
	Created time.Time
	// ObjectID is data.object.id: the pi_, ch_, re_, dp_, po_… the event is
	// about.
	ObjectID string
	// PaymentIntentID is the payment the event concerns; empty for payouts
	// and unrelated objects.
	PaymentIntentID string
	// Payload is the exact body Stripe would POST: the event envelope,
	// indented as Stripe sends it. It is shared; do not modify it.
	Payload []byte
	// APIPayload is the event as GET /v1/events and GET /v1/events/{id}
	// render it: in the account's API version when it was created
	// (Config.AccountAPIVersion), the same bytes as Payload when that is
	// the webhook endpoint's. Shared too.
	APIPayload []byte
	// APIVersion is the account's API version when it was created.
	APIVersion string
}

type envelope struct {
	ID              string       `json:"id"`
	Object          string       `json:"object"`
	APIVersion      string       `json:"api_version"`
	Created         int64        `json:"created"`
	Data            envelopeData `json:"data"`
	Livemode        bool         `json:"livemode"`
	PendingWebhooks int          `json:"pending_webhooks"`
	Request         eventRequest `json:"request"`
	Type            EventType    `json:"type"`
}

type envelopeData struct {
	Object             any            `json:"object"`
	PreviousAttributes map[string]any `json:"previous_attributes,omitempty"`
}

// eventRequest names the API request that caused the event; both fields are
// null for events Stripe raises on its own (disputes, payouts, failures).
type eventRequest struct {
	ID             *string `json:"id"`
	IdempotencyKey *string `json:"idempotency_key"`
}

func (s *Sim) newRequestLocked() *string {
	id := s.newID("req")
	return &id
}

// emitLocked renders obj as it is now into a new event, so later changes to
// obj do not leak into this event's payload.
func (s *Sim) emitLocked(typ EventType, obj any, paymentIntentID string, req *string, prev map[string]any) Event {
	env := envelope{
		ID:              s.newID("evt"),
		Object:          "event",
		APIVersion:      APIVersion,
		Created:         s.unix(),
		Data:            envelopeData{Object: obj, PreviousAttributes: prev},
		PendingWebhooks: 1,
		Request:         eventRequest{ID: req},
		Type:            typ,
	}
	payload := encodeEvent(env)
	ev := Event{
		ID:              env.ID,
		Type:            typ,
		Created:         s.now,
		ObjectID:        objectID(payload),
		PaymentIntentID: paymentIntentID,
		Payload:         payload,
		APIPayload:      payload,
		APIVersion:      APIVersion,
	}
	if legacy := s.apiRenderingLocked(obj); legacy != nil {
		env.APIVersion, env.Data.Object = s.accountVersion, legacy
		ev.APIPayload, ev.APIVersion = encodeEvent(env), s.accountVersion
	}
	s.eventIdx[ev.ID] = len(s.events)
	s.events = append(s.events, ev)
	return ev
}

// encodeEvent renders an event envelope, indented as Stripe sends it.
func encodeEvent(env envelope) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(env); err != nil {
		panic(fmt.Sprintf("stripesim: encode %s: %v", env.Type, err))
	}
	return bytes.TrimRight(buf.Bytes(), "\n")
}

func objectID(payload []byte) string {
	var v struct {
		Data struct {
			Object struct {
				ID string `json:"id"`
			} `json:"object"`
		} `json:"data"`
	}
	_ = json.Unmarshal(payload, &v)
	return v.Data.Object.ID
}

// Emit emits an event of any type with object as data.object, verbatim. It
// is the escape hatch for what the typed methods refuse to build: a negative
// amount, an unknown currency, a refund in another currency than its charge.
// PaymentIntentID is taken from the object's "payment_intent" field, or its
// id if that starts with pi_. It panics if object cannot be encoded as a
// JSON object.
func (s *Sim) Emit(typ EventType, object any) Event {
	raw, err := json.Marshal(object)
	if err != nil {
		panic(fmt.Sprintf("stripesim: Emit %s: %v", typ, err))
	}
	var fields struct {
		ID            string          `json:"id"`
		PaymentIntent json.RawMessage `json:"payment_intent"`
	}
	if err := json.Unmarshal(raw, &fields); err != nil {
		panic(fmt.Sprintf("stripesim: Emit %s: data.object must be a JSON object: %v", typ, err))
	}
	pi := ""
	var piID string
	if json.Unmarshal(fields.PaymentIntent, &piID) == nil {
		pi = piID
	}
	if pi == "" && len(fields.ID) > 3 && fields.ID[:3] == "pi_" {
		pi = fields.ID
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.emitLocked(typ, json.RawMessage(raw), pi, nil, nil)
}

// Events returns every event emitted, skipped ones included, in creation
// order.
func (s *Sim) Events() []Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Event(nil), s.events...)
}

// PaymentPairs returns the first n events of payments made one after
// another, each paid in full with a receipt email: a
// payment_intent.succeeded and a charge.succeeded a payment, about 1.2 kB
// each. The benchmarks ingest and apply them, as make bench's usual pair.
func PaymentPairs(n int) []Event {
	sim := New(Config{Seed: 5})
	for i := 0; 2*i < n; i++ {
		sim.Pay(PayOpts{Amount: 1000 + int64(2*i), Currency: "usd", Email: "bench@example.test"})
	}
	return sim.Events()[:n]
}

// Deliverable returns the events Deliver would send: all of them, in
// creation order, except those marked with SkipEvent.
func (s *Sim) Deliverable() []Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Event, 0, len(s.events))
	for _, ev := range s.events {
		if !s.skipped[ev.ID] {
			out = append(out, ev)
		}
	}
	return out
}

// EventsOf returns, in creation order, the events whose object is id or
// that concern the payment id.
func (s *Sim) EventsOf(id string) []Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Event
	for _, ev := range s.events {
		if ev.ObjectID == id || ev.PaymentIntentID == id {
			out = append(out, ev)
		}
	}
	return out
}

// Event returns one event by id.
func (s *Sim) Event(id string) (Event, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i, ok := s.eventIdx[id]
	if !ok {
		return Event{}, false
	}
	return s.events[i], true
}

// SkipEvent marks an event as never delivered: it stays listed at
// GET /v1/events (the provider has it) but Deliver leaves it out, so the
// ledger misses its effect. It panics on an unknown id.
func (s *Sim) SkipEvent(eventID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.eventIdx[eventID]; !ok {
		panic("stripesim: SkipEvent: unknown event " + eventID)
	}
	s.skipped[eventID] = true
}

func (s *Sim) isSkipped(eventID string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.skipped[eventID]
}
