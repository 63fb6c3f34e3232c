package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/paygate/paygate/delivery"
	"github.com/paygate/paygate/inbox"
	"github.com/paygate/paygate/outbox"
)

// downstreamRoutes mounts what the merchant's systems are told: the
// endpoints and their deliveries (ops), the messages (ops), the feed
// (consumer, ops).
func (s *Server) downstreamRoutes(v1 *echo.Group) {
	opsOnly := requireRole(RoleOps)
	v1.POST("/endpoints", s.createEndpoint, opsOnly)
	v1.GET("/endpoints", s.listEndpoints, opsOnly)
	v1.GET("/endpoints/:endpoint_id", s.getEndpoint, opsOnly)
	v1.PATCH("/endpoints/:endpoint_id", s.updateEndpoint, opsOnly)
	v1.DELETE("/endpoints/:endpoint_id", s.deleteEndpoint, opsOnly)
	v1.GET("/endpoints/:endpoint_id/secret", s.getEndpointSecret, opsOnly)
	v1.POST("/endpoints/:endpoint_id/secret/rotate", s.rotateEndpointSecret, opsOnly)
	v1.GET("/endpoints/:endpoint_id/deliveries", s.listDeliveries, opsOnly)
	v1.GET("/endpoints/:endpoint_id/deliveries/:message_id", s.getDelivery, opsOnly)
	v1.POST("/endpoints/:endpoint_id/recover", s.recoverEndpoint, opsOnly)
	v1.GET("/messages/:message_id", s.getMessage, opsOnly)
	v1.POST("/messages/:message_id/resend", s.resendMessage, opsOnly)
	v1.GET("/feed", s.feed, requireRole(RoleConsumer, RoleOps))
	v1.GET("/ops/broker", s.broker, opsOnly)
}

// BrokerView is where publishing to NATS JetStream stands.
type BrokerView struct {
	Configured    bool       `json:"configured"`
	URL           *string    `json:"url"`
	Stream        *string    `json:"stream"`
	SubjectPrefix *string    `json:"subject_prefix"`
	Connected     bool       `json:"connected"`
	Backlog       int64      `json:"backlog"`
	OldestSeconds float64    `json:"oldest_seconds"`
	FailingSince  *time.Time `json:"failing_since"`
	LastError     *string    `json:"last_error"`
	AlertedAt     *time.Time `json:"alerted_at"`
}

func (s *Server) broker(c echo.Context) error {
	st, err := s.config.NATS.Status(c.Request().Context())
	if err != nil {
		return err
	}
	v := BrokerView{Configured: st.Configured, URL: nullable(st.URL), Stream: nullable(st.Stream),
		SubjectPrefix: nullable(st.SubjectPrefix), Connected: st.Connected, Backlog: st.Backlog,
		OldestSeconds: st.OldestSeconds, LastError: nullable(st.LastError)}
	if st.FailingSince != nil {
		t := st.FailingSince.UTC()
		v.FailingSince = &t
	}
	if st.AlertedAt != nil {
		t := st.AlertedAt.UTC()
		v.AlertedAt = &t
	}
	return writeJSON(c, http.StatusOK, v)
}

// EndpointView is an endpoint as the API shows it; Secret only when it is
// created.
type EndpointView struct {
	ID             string     `json:"id"`
	URL            string     `json:"url"`
	EventTypes     []string   `json:"event_types"`
	Description    string     `json:"description"`
	Status         string     `json:"status"`
	DisabledReason *string    `json:"disabled_reason"`
	Secret         string     `json:"secret,omitempty"`
	FailingSince   *time.Time `json:"failing_since"`
	LastSuccessAt  *time.Time `json:"last_success_at"`
	LastFailureAt  *time.Time `json:"last_failure_at"`
	CreatedAt      time.Time  `json:"created_at"`
	UpdatedAt      time.Time  `json:"updated_at"`
}

func endpointView(e delivery.Endpoint) EndpointView {
	utc := func(t *time.Time) *time.Time {
		if t == nil {
			return nil
		}
		u := t.UTC()
		return &u
	}
	return EndpointView{
		ID: e.ID, URL: e.URL, EventTypes: e.EventTypes, Description: e.Description, Status: string(e.Status),
		DisabledReason: nullable(e.DisabledReason), FailingSince: utc(e.FailingSince),
		LastSuccessAt: utc(e.LastSuccessAt), LastFailureAt: utc(e.LastFailureAt),
		CreatedAt: e.CreatedAt.UTC(), UpdatedAt: e.UpdatedAt.UTC(),
	}
}

// EndpointPage is the body of GET /v1/endpoints.
type EndpointPage struct {
	Endpoints  []EndpointView `json:"endpoints"`
	NextCursor *string        `json:"next_cursor"`
}

// EndpointBody is the body of POST /v1/endpoints and PATCH
// /v1/endpoints/{endpoint_id}.
type EndpointBody struct {
	URL         *string   `json:"url"`
	EventTypes  *[]string `json:"event_types"`
	Description *string   `json:"description"`
	Status      *string   `json:"status"`
}

// SecretView is an endpoint's signing secret.
type SecretView struct {
	Secret string `json:"secret"`
}

func (s *Server) store() (*delivery.Store, error) {
	if s.config.Delivery == nil {
		return nil, errDeliveryUnavailable
	}
	return s.config.Delivery, nil
}

func (s *Server) createEndpoint(c echo.Context) error {
	var body EndpointBody
	if err := decodeBody(c, &body); err != nil {
		return err
	}
	if body.URL == nil || body.EventTypes == nil {
		return badRequest("url and event_types are required")
	}
	if body.Status != nil {
		return badRequest("an endpoint is created enabled; status is set with PATCH")
	}
	st, err := s.store()
	if err != nil {
		return err
	}
	n := delivery.NewEndpoint{URL: *body.URL, EventTypes: *body.EventTypes}
	if body.Description != nil {
		n.Description = *body.Description
	}
	e, err := st.Create(c.Request().Context(), n)
	if err != nil {
		return err
	}
	v := endpointView(e)
	v.Secret = e.Secret // shown once here, and on the secret route
	return writeJSON(c, http.StatusCreated, v)
}

func (s *Server) listEndpoints(c echo.Context) error {
	page, err := pageOf(c)
	if err != nil {
		return err
	}
	if page.Limit == 0 {
		page.Limit = inbox.DefaultLimit
	}
	eps, next, err := delivery.ListEndpoints(c.Request().Context(), s.config.Pool, page.Cursor, page.Limit)
	if err != nil {
		return err
	}
	out := EndpointPage{Endpoints: make([]EndpointView, 0, len(eps)), NextCursor: nullable(next)}
	for _, e := range eps {
		out.Endpoints = append(out.Endpoints, endpointView(e))
	}
	return writeJSON(c, http.StatusOK, out)
}

func (s *Server) getEndpoint(c echo.Context) error {
	e, err := delivery.GetEndpoint(c.Request().Context(), s.config.Pool, c.Param("endpoint_id"))
	if err != nil {
		return err
	}
	return writeJSON(c, http.StatusOK, endpointView(e))
}

func (s *Server) updateEndpoint(c echo.Context) error {
	var body EndpointBody
	if err := decodeBody(c, &body); err != nil {
		return err
	}
	st, err := s.store()
	if err != nil {
		return err
	}
	p := delivery.Patch{URL: body.URL, EventTypes: body.EventTypes, Description: body.Description}
	if body.Status != nil {
		status := delivery.Status(*body.Status)
		p.Status = &status
	}
	e, err := st.Update(c.Request().Context(), c.Param("endpoint_id"), p)
	if err != nil {
		return err
	}
	return writeJSON(c, http.StatusOK, endpointView(e))
}

func (s *Server) deleteEndpoint(c echo.Context) error {
	st, err := s.store()
	if err != nil {
		return err
	}
	if err := st.Delete(c.Request().Context(), c.Param("endpoint_id")); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

func (s *Server) getEndpointSecret(c echo.Context) error {
	e, err := delivery.GetEndpoint(c.Request().Context(), s.config.Pool, c.Param("endpoint_id"))
	if err != nil {
		return err
	}
	return writeJSON(c, http.StatusOK, SecretView{Secret: e.Secret})
}

func (s *Server) rotateEndpointSecret(c echo.Context) error {
	st, err := s.store()
	if err != nil {
		return err
	}
	secret, err := st.RotateSecret(c.Request().Context(), c.Param("endpoint_id"))
	if err != nil {
		return err
	}
	return writeJSON(c, http.StatusOK, SecretView{Secret: secret})
}

// DeliveryView is one message at one endpoint.
type DeliveryView struct {
	MessageID      string     `json:"message_id"`
	Type           string     `json:"type"`
	Status         string     `json:"status"`
	Attempts       int        `json:"attempts"`
	LastAttemptAt  *time.Time `json:"last_attempt_at"`
	NextAttemptAt  *time.Time `json:"next_attempt_at"`
	ResponseStatus *int       `json:"response_status"`
	Error          *string    `json:"error"`
}

func deliveryView(d delivery.Delivery) DeliveryView {
	v := DeliveryView{MessageID: d.MessageID, Type: d.Type, Status: string(d.Status), Attempts: d.Attempts,
		ResponseStatus: d.ResponseStatus, Error: nullable(d.Error)}
	if d.LastAttemptAt != nil {
		t := d.LastAttemptAt.UTC()
		v.LastAttemptAt = &t
	}
	if d.NextAttemptAt != nil {
		t := d.NextAttemptAt.UTC()
		v.NextAttemptAt = &t
	}
	return v
}

// DeliveryPage is the body of GET /v1/endpoints/{endpoint_id}/deliveries.
type DeliveryPage struct {
	Deliveries []DeliveryView `json:"deliveries"`
	NextCursor *string        `json:"next_cursor"`
}

func (s *Server) listDeliveries(c echo.Context) error {
	page, err := pageOf(c)
	if err != nil {
		return err
	}
	if page.Limit == 0 {
		page.Limit = inbox.DefaultLimit
	}
	f := delivery.DeliveryFilter{Status: delivery.DeliveryStatus(c.QueryParam("status")), MessageID: c.QueryParam("message_id")}
	if f.Status != "" && !slices.Contains([]delivery.DeliveryStatus{delivery.DeliveryPending, delivery.DeliverySucceeded, delivery.DeliveryFailed}, f.Status) {
		return badRequest("status must be one of pending, succeeded, failed")
	}
	ds, next, err := delivery.ListDeliveries(c.Request().Context(), s.config.Pool, c.Param("endpoint_id"), f, page.Cursor, page.Limit)
	if err != nil {
		return err
	}
	out := DeliveryPage{Deliveries: make([]DeliveryView, 0, len(ds)), NextCursor: nullable(next)}
	for _, d := range ds {
		out.Deliveries = append(out.Deliveries, deliveryView(d))
	}
	return writeJSON(c, http.StatusOK, out)
}

// DeliveryAttemptView is one attempt at a delivery.
type DeliveryAttemptView struct {
	Attempt        int       `json:"attempt"`
	Trigger        string    `json:"trigger"`
	At             time.Time `json:"at"`
	DurationMS     int64     `json:"duration_ms"`
	ResponseStatus *int      `json:"response_status"`
	ResponseBody   *string   `json:"response_body"`
	Error          *string   `json:"error"`
}

// DeliveryDetailView is one delivery with its attempts.
type DeliveryDetailView struct {
	DeliveryView
	AttemptsMade []DeliveryAttemptView `json:"attempt_log"`
}

func (s *Server) getDelivery(c echo.Context) error {
	ctx := c.Request().Context()
	endpointID, messageID := c.Param("endpoint_id"), c.Param("message_id")
	ds, _, err := delivery.ListDeliveries(ctx, s.config.Pool, endpointID, delivery.DeliveryFilter{MessageID: messageID}, "", 1)
	if err != nil {
		return err
	}
	if len(ds) == 0 {
		return fmt.Errorf("%s at %s: %w", messageID, endpointID, delivery.ErrDeliveryNotFound)
	}
	attempts, err := delivery.Attempts(ctx, s.config.Pool, endpointID, messageID)
	if err != nil {
		return err
	}
	v := DeliveryDetailView{DeliveryView: deliveryView(ds[0]), AttemptsMade: make([]DeliveryAttemptView, 0, len(attempts))}
	for _, a := range attempts {
		v.AttemptsMade = append(v.AttemptsMade, DeliveryAttemptView{Attempt: a.Attempt, Trigger: a.Trigger, At: a.At.UTC(),
			DurationMS: a.Duration.Milliseconds(), ResponseStatus: a.ResponseStatus,
			ResponseBody: nullable(a.ResponseBody), Error: nullable(a.Error)})
	}
	return writeJSON(c, http.StatusOK, v)
}

// RecoverBody is the body of POST /v1/endpoints/{endpoint_id}/recover.
type RecoverBody struct {
	Since *time.Time `json:"since"`
	Until *time.Time `json:"until"`
}

// maxRecoverWindow bounds a recovery to the messages a retention can hold.
const maxRecoverWindow = 90 * 24 * time.Hour

func (s *Server) recoverEndpoint(c echo.Context) error {
	var body RecoverBody
	if err := decodeBody(c, &body); err != nil {
		return err
	}
	if body.Since == nil {
		return badRequest("since is required (RFC 3339)")
	}
	until := time.Now()
	if body.Until != nil {
		until = *body.Until
	}
	if !until.After(*body.Since) || until.Sub(*body.Since) > maxRecoverWindow {
		return badRequest("until must be after since, and the window at most 90 days")
	}
	st, err := s.store()
	if err != nil {
		return err
	}
	n, err := st.Recover(c.Request().Context(), c.Param("endpoint_id"), *body.Since, until)
	if err != nil {
		return err
	}
	return writeJSON(c, http.StatusAccepted, map[string]int{"queued": n})
}

// MessageView is a message as GET /v1/messages/{message_id} shows it: the
// message, and where it stands at each endpoint.
type MessageView struct {
	ID         string                `json:"id"`
	Type       string                `json:"type"`
	CreatedAt  time.Time             `json:"created_at"`
	Sequence   int64                 `json:"sequence"`
	Data       json.RawMessage       `json:"data"`
	Deliveries []MessageDeliveryView `json:"deliveries"`
}

// MessageDeliveryView is where a message stands at one endpoint.
type MessageDeliveryView struct {
	EndpointID string `json:"endpoint_id"`
	Status     string `json:"status"`
	Attempts   int    `json:"attempts"`
}

func (s *Server) getMessage(c echo.Context) error {
	ctx := c.Request().Context()
	m, err := outbox.Get(ctx, s.config.Pool, c.Param("message_id"))
	if err != nil {
		return err
	}
	var v MessageView
	if err := json.Unmarshal(m.Body, &v); err != nil {
		return fmt.Errorf("decode message %s: %w", m.ID, err)
	}
	ds, err := delivery.DeliveriesOfMessage(ctx, s.config.Pool, m.ID)
	if err != nil {
		return err
	}
	v.Deliveries = make([]MessageDeliveryView, 0, len(ds))
	for _, d := range ds {
		v.Deliveries = append(v.Deliveries, MessageDeliveryView{EndpointID: d.EndpointID, Status: string(d.Status), Attempts: d.Attempts})
	}
	return writeJSON(c, http.StatusOK, v)
}

// ResendBody is the body of POST /v1/messages/{message_id}/resend.
type ResendBody struct {
	EndpointID string `json:"endpoint_id"`
}

func (s *Server) resendMessage(c echo.Context) error {
	var body ResendBody
	if err := decodeBody(c, &body); err != nil {
		return err
	}
	if body.EndpointID == "" {
		return badRequest("endpoint_id is required")
	}
	st, err := s.store()
	if err != nil {
		return err
	}
	queued, err := st.Resend(c.Request().Context(), c.Param("message_id"), body.EndpointID)
	if err != nil {
		return err
	}
	return writeJSON(c, http.StatusAccepted, map[string]bool{"queued": queued})
}

// The feed's bounds.
const (
	feedDefaultLimit = 100
	feedMaxLimit     = 1000
	feedMaxWait      = 30 * time.Second
	// feedPoll is how often a waiting request looks again.
	feedPoll = 200 * time.Millisecond
)

// FeedPage is the body of GET /v1/feed.
type FeedPage struct {
	Messages   []json.RawMessage `json:"messages"`
	NextCursor string            `json:"next_cursor"`
}

// writeFeed writes a FeedPage by hand, so that each message is its stored
// bytes, exactly as the webhooks and the broker carry them (an encoder
// would re-indent them).
func writeFeed(c echo.Context, msgs []outbox.Message, after int64) error {
	next := outbox.Cursor(after)
	if len(msgs) > 0 {
		next = outbox.Cursor(msgs[len(msgs)-1].Position)
	}
	var b bytes.Buffer
	b.WriteString(`{"messages":[`)
	for i, m := range msgs {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(m.Body)
	}
	fmt.Fprintf(&b, `],"next_cursor":%q}`, next)
	return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, b.Bytes())
}

func (s *Server) feed(c echo.Context) error {
	after, err := outbox.ParseCursor(c.QueryParam("after"))
	if err != nil {
		return badRequest("after is not a cursor this feed handed out")
	}
	limit := feedDefaultLimit
	if v := c.QueryParam("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > feedMaxLimit {
			return badRequest("limit must be a whole number from 1 to %d", feedMaxLimit)
		}
		limit = n
	}
	var types []string
	if v := c.QueryParam("types"); v != "" {
		known := outbox.Types()
		for _, t := range strings.Split(v, ",") {
			if !slices.Contains(known, t) {
				return badRequest("unknown message type %q in types", t)
			}
			types = append(types, t)
		}
	}
	var wait time.Duration
	if v := c.QueryParam("wait"); v != "" {
		d, err := time.ParseDuration(v)
		if n, aerr := strconv.Atoi(v); aerr == nil {
			d, err = time.Duration(n)*time.Second, nil
		}
		if err != nil || d < 0 || d > feedMaxWait {
			return badRequest("wait must be a duration from 0 to 30s, such as 10s")
		}
		wait = d
	}
	ctx := c.Request().Context()
	deadline := time.Now().Add(wait)
	for {
		// Place what committed since: a reader asking is reason enough
		// (the relay of a running server does it too).
		if _, err := outbox.Sequence(ctx, s.config.Pool, 10_000); err != nil {
			return err
		}
		msgs, err := outbox.Read(ctx, s.config.Pool, after, limit, types)
		if err != nil {
			return err
		}
		if len(msgs) > 0 || !time.Now().Add(feedPoll).Before(deadline) {
			return writeFeed(c, msgs, after)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(feedPoll):
		}
	}
}
