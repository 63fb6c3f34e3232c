package api

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"riverqueue.com/riverui"

	"github.com/paygate/paygate/inbox"
	"github.com/paygate/paygate/jobs"
	"github.com/paygate/paygate/ledger"
	"github.com/paygate/paygate/provider/stripe"
	"github.com/paygate/paygate/reconcile"
	"github.com/paygate/paygate/strictjson"
)

// opsState is what the operations layer adds to the Server.
type opsState struct {
	postRoles  map[string][]Role       // POST route path → roles, checked before the key
	postBodies map[string]reflect.Type // POST route path → its body's type, for the key's fingerprint
	actions    *prometheus.CounterVec
	riverUI    *riverui.Handler
}

// maxReasonLen bounds an operator's reason: a sentence, not a document.
const maxReasonLen = 2000

// AttemptView is one failed processing attempt of an event.
type AttemptView struct {
	JobID   int64     `json:"job_id"`
	Attempt int       `json:"attempt"`
	At      time.Time `json:"at"`
	Error   string    `json:"error"`
}

// OpsEventView is an event as the poison queue shows it: the event object
// and every attempt's error.
type OpsEventView struct {
	EventView
	Errors []AttemptView `json:"errors"`
}

// NewOpsEventView builds the poison queue's view of an event (used by the
// CLI as well). The payload is included when withPayload.
func NewOpsEventView(e inbox.Event, errs []jobs.AttemptError, withPayload bool) OpsEventView {
	v := OpsEventView{EventView: eventView(e), Errors: make([]AttemptView, 0, len(errs))}
	if withPayload && json.Valid(e.Payload) {
		v.Payload = json.RawMessage(e.Payload)
	}
	for _, ae := range errs {
		v.Errors = append(v.Errors, AttemptView{JobID: ae.JobID, Attempt: ae.Attempt, At: ae.At.UTC(), Error: ae.Error})
	}
	return v
}

// PoisonPage is the body of GET /v1/ops/poison and GET /v1/events.
type PoisonPage struct {
	Events     []OpsEventView `json:"events"`
	NextCursor *string        `json:"next_cursor"`
}

// AuditEntryView is one audit log entry.
type AuditEntryView struct {
	ID             int64     `json:"id"`
	At             time.Time `json:"at"`
	Actor          string    `json:"actor"`
	Action         string    `json:"action"`
	Provider       *string   `json:"provider"`
	EventID        *string   `json:"event_id"`
	Reason         *string   `json:"reason"`
	IdempotencyKey *string   `json:"idempotency_key"`
}

// AuditPage is the body of GET /v1/ops/audit.
type AuditPage struct {
	Entries    []AuditEntryView `json:"entries"`
	NextCursor *string          `json:"next_cursor"`
}

// BulkReplayRequest is the body of POST /v1/ops/replay. At least one filter
// (status, type, error, received_after, received_before) is required;
// status then defaults to poison, and the others narrow the selection as on
// GET /v1/ops/poison.
type BulkReplayRequest struct {
	Status         inbox.Status `json:"status"`
	Type           string       `json:"type"`
	Error          string       `json:"error"`
	ReceivedAfter  *time.Time   `json:"received_after"`
	ReceivedBefore *time.Time   `json:"received_before"`
	DryRun         bool         `json:"dry_run"`
	Reason         string       `json:"reason"`
}

// hasFilter reports whether r selects anything itself: an empty body (or
// one with only dry_run and reason) must never mean "replay everything".
func (r BulkReplayRequest) hasFilter() bool {
	return r.Status != "" || r.Type != "" || r.Error != "" || r.ReceivedAfter != nil || r.ReceivedBefore != nil
}

// BulkReplayResponse is the answer of POST /v1/ops/replay.
type BulkReplayResponse struct {
	Matched  int64 `json:"matched"`
	Replayed int64 `json:"replayed"`
	DryRun   bool  `json:"dry_run"`
}

type reasonRequest struct {
	Reason string `json:"reason"`
}

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func badRequest(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrBadRequest, fmt.Sprintf(format, args...))
}

// pageOf reads ?cursor= and ?limit=.
func pageOf(c echo.Context) (inbox.Page, error) {
	p := inbox.Page{Cursor: c.QueryParam("cursor")}
	if v := c.QueryParam("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return p, badRequest("limit must be a whole number from 1 to %d", inbox.MaxLimit)
		}
		p.Limit = min(n, inbox.MaxLimit)
	}
	return p, nil
}

func timeParam(c echo.Context, name string) (time.Time, error) {
	v := c.QueryParam(name)
	if v == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, badRequest("%s must be an RFC 3339 time such as 2024-06-20T12:00:00Z", name)
	}
	return t, nil
}

func cursorErr(err error) error {
	if errors.Is(err, inbox.ErrBadCursor) || errors.Is(err, ledger.ErrBadCursor) || errors.Is(err, reconcile.ErrBadCursor) {
		return badRequest("cursor is not one this API handed out")
	}
	return err
}

// decodeBody decodes the request's optional JSON body into v (decodeJSON).
func decodeBody(c echo.Context, v any) error {
	body, err := io.ReadAll(c.Request().Body)
	if err != nil {
		return badRequest("could not read the request body")
	}
	return decodeJSON(body, v)
}

// decodeJSON is how every /v1 handler reads its body, and what the
// Idempotency-Key's fingerprint covers: strictly (strictjson: key names
// exactly as documented, none twice, text valid UTF-8 without NUL, as every
// other reader would read it), refusing unknown fields so that a typo is not
// silently ignored. An empty body leaves v as it is.
func decodeJSON(body []byte, v any) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return nil
	}
	if err := strictjson.UnmarshalOpts(body, v, &strictjson.Opts{DisallowUnknownFields: true}); err != nil {
		return badRequest("the body is not valid JSON for this request: %v", err)
	}
	return nil
}

func (s *Server) operation(c echo.Context, reason string) inbox.Operation {
	return inbox.Operation{Actor: callerOf(c).Identity, Reason: reason, IdempotencyKey: IdempotencyKeyOf(c)}
}

func (s *Server) countAction(c echo.Context, action inbox.Action, n int64) {
	if n == 0 || s.ops.actions == nil {
		return
	}
	AfterCommit(c, func() { s.ops.actions.WithLabelValues(string(action)).Add(float64(n)) })
}

func (s *Server) listPoison(c echo.Context) error {
	page, err := pageOf(c)
	if err != nil {
		return err
	}
	f := inbox.Filter{Status: inbox.StatusPoison, Type: c.QueryParam("type"), ErrorContains: c.QueryParam("error")}
	if f.ReceivedAfter, err = timeParam(c, "received_after"); err != nil {
		return err
	}
	if f.ReceivedBefore, err = timeParam(c, "received_before"); err != nil {
		return err
	}
	return s.writeEventPage(c, f, page)
}

// listEvents is every event, not only the poison queue's, with the same
// objects and paging. payment_id selects the events a payment's facts,
// ledger transactions or history were recorded from.
func (s *Server) listEvents(c echo.Context) error {
	page, err := pageOf(c)
	if err != nil {
		return err
	}
	f := inbox.Filter{Provider: c.QueryParam("provider"), Status: inbox.Status(c.QueryParam("status")), Type: c.QueryParam("type")}
	if f.Status != "" && !slices.Contains(inbox.Statuses, f.Status) {
		return badRequest("status must be one of received, processed, ignored, poison, discarded")
	}
	if id := c.QueryParam("payment_id"); id != "" {
		provider, ids, err := ledger.EventsOfPayment(c.Request().Context(), s.config.Pool, id)
		if err != nil {
			return err
		}
		if f.Provider != "" && f.Provider != provider {
			ids = []string{}
		}
		f.Provider, f.EventIDs = provider, ids
	}
	return s.writeEventPage(c, f, page)
}

// writeEventPage answers one page of the events f selects, each with its
// attempts' errors.
func (s *Server) writeEventPage(c echo.Context, f inbox.Filter, page inbox.Page) error {
	ctx := c.Request().Context()
	out := PoisonPage{Events: []OpsEventView{}}
	if f.EventIDs != nil && len(f.EventIDs) == 0 {
		return writeJSON(c, http.StatusOK, out)
	}
	events, next, err := inbox.List(ctx, s.config.Pool, f, page)
	if err != nil {
		return cursorErr(err)
	}
	byProvider := map[string][]string{}
	for _, e := range events {
		byProvider[e.Provider] = append(byProvider[e.Provider], e.EventID)
	}
	errs := map[inbox.Key][]jobs.AttemptError{}
	for provider, ids := range byProvider {
		m, err := jobs.AttemptErrors(ctx, s.config.Pool, provider, ids)
		if err != nil {
			return err
		}
		for id, list := range m {
			errs[inbox.Key{Provider: provider, EventID: id}] = list
		}
	}
	out.NextCursor = nullable(next)
	for _, e := range events {
		out.Events = append(out.Events, NewOpsEventView(e, errs[inbox.Key{Provider: e.Provider, EventID: e.EventID}], false))
	}
	return writeJSON(c, http.StatusOK, out)
}

func (s *Server) replayEvent(c echo.Context) error {
	var body reasonRequest
	if err := decodeBody(c, &body); err != nil {
		return err
	}
	if len(body.Reason) > maxReasonLen {
		return badRequest("reason is longer than %d bytes", maxReasonLen)
	}
	tx, err := TxFrom(c)
	if err != nil {
		return err
	}
	ev, err := s.config.Jobs.ReplayEventTx(c.Request().Context(), tx, c.Param("provider"), c.Param("event_id"),
		s.operation(c, strings.TrimSpace(body.Reason)))
	if err != nil {
		return err
	}
	s.countAction(c, inbox.ActionReplay, 1)
	return writeJSON(c, http.StatusAccepted, eventView(ev))
}

func (s *Server) discardEvent(c echo.Context) error {
	var body reasonRequest
	if err := decodeBody(c, &body); err != nil {
		return err
	}
	reason := strings.TrimSpace(body.Reason)
	if reason == "" {
		return badRequest(`a discard needs a "reason": who reads the audit log must know why`)
	}
	if len(reason) > maxReasonLen {
		return badRequest("reason is longer than %d bytes", maxReasonLen)
	}
	tx, err := TxFrom(c)
	if err != nil {
		return err
	}
	ev, err := s.config.Jobs.DiscardEventTx(c.Request().Context(), tx, c.Param("provider"), c.Param("event_id"), s.operation(c, reason))
	if errors.Is(err, inbox.ErrAlreadyProcessed) {
		// An answer, not a failure: stored under the key like any other.
		return answerError(c, err)
	}
	if err != nil {
		return err
	}
	s.countAction(c, inbox.ActionDiscard, 1)
	return writeJSON(c, http.StatusOK, eventView(ev))
}

func (s *Server) bulkReplay(c echo.Context) error {
	var body BulkReplayRequest
	if err := decodeBody(c, &body); err != nil {
		return err
	}
	if !body.hasFilter() {
		return badRequest(`a bulk replay needs a filter: one of status, type, error, received_after or received_before ` +
			`(to replay every poison event, send {"status":"poison"})`)
	}
	if body.Status == "" {
		body.Status = inbox.StatusPoison
	}
	if !slices.Contains(inbox.Statuses, body.Status) {
		return badRequest("status must be one of received, processed, ignored, poison, discarded")
	}
	if len(body.Reason) > maxReasonLen {
		return badRequest("reason is longer than %d bytes", maxReasonLen)
	}
	f := inbox.Filter{Status: body.Status, Type: body.Type, ErrorContains: body.Error}
	if body.ReceivedAfter != nil {
		f.ReceivedAfter = *body.ReceivedAfter
	}
	if body.ReceivedBefore != nil {
		f.ReceivedBefore = *body.ReceivedBefore
	}
	tx, err := TxFrom(c)
	if err != nil {
		return err
	}
	res, err := s.config.Jobs.ReplayMatchingTx(c.Request().Context(), tx, f, s.operation(c, strings.TrimSpace(body.Reason)), body.DryRun)
	if err != nil {
		return err
	}
	s.countAction(c, inbox.ActionBulkReplay, res.Replayed)
	status := http.StatusAccepted
	if body.DryRun {
		status = http.StatusOK
	}
	return writeJSON(c, status, BulkReplayResponse{Matched: res.Matched, Replayed: res.Replayed, DryRun: res.DryRun})
}

func (s *Server) listAudit(c echo.Context) error {
	page, err := pageOf(c)
	if err != nil {
		return err
	}
	f := inbox.AuditFilter{EventID: c.QueryParam("event_id")}
	if f.EventID != "" {
		// An event id means something within its provider only; Stripe's
		// is the default, as before there were others.
		f.Provider = cmp.Or(c.QueryParam("provider"), stripe.Name)
	}
	entries, next, err := inbox.ListAudit(c.Request().Context(), s.config.Pool, f, page)
	if err != nil {
		return cursorErr(err)
	}
	out := AuditPage{Entries: make([]AuditEntryView, 0, len(entries)), NextCursor: nullable(next)}
	for _, e := range entries {
		out.Entries = append(out.Entries, AuditEntryView{
			ID: e.ID, At: e.At.UTC(), Actor: e.Actor, Action: string(e.Action),
			Provider: nullable(e.Provider), EventID: nullable(e.EventID),
			Reason: nullable(e.Reason), IdempotencyKey: nullable(e.IdempotencyKey),
		})
	}
	return writeJSON(c, http.StatusOK, out)
}
