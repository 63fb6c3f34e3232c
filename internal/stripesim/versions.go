package stripesim

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
)

// LegacyAPIVersion is an API version before 2022-11-15 the account can be
// on (Config.AccountAPIVersion), in which GET /v1/events renders a
// PaymentIntent with its charges list ({"object":"list","data":[…]},
// newest first) and no latest_charge, and a charge with its refunds list:
// 2022-11-15 replaced the one with latest_charge and stopped including the
// other (stripe-go 74.0.0's changelog: "Removed `Charges` field on
// `PaymentIntent` and replace it with `LatestCharge`").
const LegacyAPIVersion = "2022-08-01"

// Stripe renders an event once, when it is created: for its webhook
// endpoints in each endpoint's pinned version (the simulator's endpoint is
// pinned to APIVersion: Payload), and for GET /v1/events in the version the
// account was on then (its api_version: APIPayload). An account that never
// upgraded, or upgraded after the endpoint was pinned, lists events shaped
// differently from the webhooks it was sent.

// SetAccountAPIVersion sets the account's API version from now on: the
// version GET /v1/events renders the events created after it in. It panics
// for a version the simulator cannot render (APIVersion and
// LegacyAPIVersion).
func (s *Sim) SetAccountAPIVersion(v string) {
	checkAccountVersion(v)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.accountVersion = v
}

func checkAccountVersion(v string) {
	if v != APIVersion && v != LegacyAPIVersion {
		panic(fmt.Sprintf("stripesim: cannot render API version %q (only %s and %s)", v, APIVersion, LegacyAPIVersion))
	}
}

// apiRenderingLocked is obj as the account's version renders it, or nil
// when that is the webhook's version.
func (s *Sim) apiRenderingLocked(obj any) any {
	if s.accountVersion == "" || s.accountVersion == APIVersion {
		return nil
	}
	switch o := obj.(type) {
	case *paymentIntent:
		return s.legacyIntentLocked(o)
	case *charge:
		return s.legacyChargeLocked(o)
	}
	return obj
}

// asMap is v's JSON object as a map, to add or drop fields of a version.
func asMap(v any) map[string]any {
	raw, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("stripesim: encode %T: %v", v, err))
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		panic(fmt.Sprintf("stripesim: %T is not an object: %v", v, err))
	}
	return m
}

// list is Stripe's list object as an expanded field renders it.
func list(url string, data []any) map[string]any {
	return map[string]any{"object": "list", "data": data, "has_more": false, "url": url}
}

func (s *Sim) legacyIntentLocked(pi *paymentIntent) map[string]any {
	m := asMap(pi)
	delete(m, "latest_charge")
	var charges []*charge
	for _, ch := range s.charges {
		if deref(ch.PaymentIntent) == pi.ID {
			charges = append(charges, ch)
		}
	}
	// Newest first, as the list was; the latest charge heads it.
	slices.SortFunc(charges, func(a, b *charge) int {
		if a.ID == deref(pi.LatestCharge) || b.ID == deref(pi.LatestCharge) {
			return boolOrder(b.ID == deref(pi.LatestCharge), a.ID == deref(pi.LatestCharge))
		}
		return cmp.Or(cmp.Compare(b.Created, a.Created), cmp.Compare(a.ID, b.ID))
	})
	data := make([]any, len(charges))
	for i, ch := range charges {
		data[i] = s.legacyChargeLocked(ch)
	}
	m["charges"] = list("/v1/charges?payment_intent="+pi.ID, data)
	return m
}

func (s *Sim) legacyChargeLocked(ch *charge) map[string]any {
	m := asMap(ch)
	var refunds []*refund
	for _, re := range s.refunds {
		if re.Charge == ch.ID {
			refunds = append(refunds, re)
		}
	}
	slices.SortFunc(refunds, func(a, b *refund) int {
		return cmp.Or(cmp.Compare(b.Created, a.Created), cmp.Compare(a.ID, b.ID))
	})
	data := make([]any, len(refunds))
	for i, re := range refunds {
		data[i] = *re
	}
	m["refunds"] = list("/v1/charges/"+ch.ID+"/refunds", data)
	return m
}

// boolOrder orders true before false.
func boolOrder(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}
