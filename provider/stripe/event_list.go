package stripe

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	stripego "github.com/stripe/stripe-go/v79"

	"github.com/paygate/paygate/provider"
)

// EventRetention is how far back Stripe's events list goes: "List events,
// going back up to 30 days" (stripe-go v79's EventListParams).
const EventRetention = 30 * 24 * time.Hour

var _ provider.EventLister = (*API)(nil)

// Retention implements provider.EventLister.
func (s *API) Retention() time.Duration { return EventRetention }

// ListEvents implements provider.EventLister with one GET /v1/events:
// created[gte] and created[lt] from the query, starting_after its cursor,
// the client's page size (100 unless configured). Stripe lists newest
// first. Retries are the client's (see NewAPI): network failures and 5xx
// after stripe-go's backoff, a rate-limited 429 waited out the same way. A
// key Stripe refuses (401) or that may not read events (403) is an
// ErrAPIRefused, as a bad request (400, 404) is.
//
// Each item is decoded with DecodeListedEvent from the bytes the page
// carried. Stripe renders a listed event in the API version of the account
// when the event was created (its api_version), not the webhook endpoint's
// pinned one, so its data.object may be shaped differently from the
// webhook's copy; the mapping reads either (see Effects).
func (s *API) ListEvents(ctx context.Context, q provider.EventQuery) (provider.EventPage, error) {
	params := &stripego.EventListParams{ListParams: s.listParams(ctx), CreatedRange: dayRange(q.From, q.To)}
	params.Single = true
	if q.After != "" {
		params.StartingAfter = stripego.String(q.After)
	}
	it := s.api.Events.List(params)
	if err := it.Err(); err != nil {
		var se *stripego.Error
		if errors.As(err, &se) && (se.HTTPStatusCode == http.StatusUnauthorized || se.HTTPStatusCode == http.StatusForbidden) {
			// A key Stripe refuses, or one not allowed to read events,
			// lists nothing until it is changed.
			return provider.EventPage{}, fmt.Errorf("%w: %w: list events: %w", provider.ErrAPI, provider.ErrAPIRefused, err)
		}
		return provider.EventPage{}, providerErr("list events", err)
	}
	l := it.EventList()
	if l == nil || l.LastResponse == nil || len(l.LastResponse.RawJSON) == 0 {
		return provider.EventPage{}, providerErr("list events", errors.New("list page without its raw body"))
	}
	var page struct {
		Data    []json.RawMessage `json:"data"`
		HasMore bool              `json:"has_more"`
	}
	if err := json.Unmarshal(l.LastResponse.RawJSON, &page); err != nil {
		return provider.EventPage{}, providerErr("list events", fmt.Errorf("decode list page: %w", err))
	}
	out := provider.EventPage{Events: make([]provider.Event, 0, len(page.Data))}
	last := ""
	for _, item := range page.Data {
		var head struct {
			ID string `json:"id"`
		}
		_ = json.Unmarshal(item, &head)
		last = head.ID
		ev, err := DecodeListedEvent(item)
		if err != nil {
			out.Unreadable = append(out.Unreadable, provider.UnreadableEvent{ID: head.ID, Err: err})
			continue
		}
		out.Events = append(out.Events, ev)
	}
	if page.HasMore {
		if last == "" {
			return provider.EventPage{}, providerErr("list events", errors.New("a page with more to come ends without an event id"))
		}
		out.Next = last
	}
	return out, nil
}

// DecodeListedEvent is DecodeEvent for an event read from Stripe's API (a
// list page's item): the same checks, with Source provider.SourceAPI.
// Nothing signs it: the authenticated call vouches for it.
func DecodeListedEvent(payload []byte) (provider.Event, error) {
	ev, err := DecodeEvent(payload)
	if err != nil {
		return provider.Event{}, err
	}
	ev.Source = provider.SourceAPI
	return ev, nil
}
