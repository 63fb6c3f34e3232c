package api

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"time"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"github.com/paygate/paygate/inbox"
	"github.com/paygate/paygate/migrations"
	"github.com/paygate/paygate/sweep"
)

// EventView is an inbox event as the API shows it.
type EventView struct {
	Provider    string          `json:"provider"`
	EventID     string          `json:"event_id"`
	Type        string          `json:"type"`
	Source      inbox.Source    `json:"source"`
	Status      inbox.Status    `json:"status"`
	Attempts    int             `json:"attempts"`
	LastError   *string         `json:"last_error"`
	ReceivedAt  time.Time       `json:"received_at"`
	ProcessedAt *time.Time      `json:"processed_at"`
	Payload     json.RawMessage `json:"payload,omitempty"`
}

func eventView(e inbox.Event) EventView {
	v := EventView{
		Provider: e.Provider, EventID: e.EventID, Type: e.Type, Source: e.Source, Status: e.Status,
		Attempts: e.Attempts, ReceivedAt: e.ReceivedAt.UTC(), ProcessedAt: e.ProcessedAt,
	}
	if e.LastError != "" {
		msg := e.LastError
		v.LastError = &msg
	}
	if v.ProcessedAt != nil {
		t := v.ProcessedAt.UTC()
		v.ProcessedAt = &t
	}
	return v
}

func (s *Server) getEvent(c echo.Context) error {
	e, err := inbox.Get(c.Request().Context(), s.config.Pool, c.Param("provider"), c.Param("event_id"))
	if err != nil {
		return err
	}
	v := eventView(e)
	if callerOf(c).Roles[RoleOps] && json.Valid(e.Payload) && utf8.Valid(e.Payload) {
		// Ops investigate failures from the payload; finance does not need it.
		return writeWithPayload(c, http.StatusOK, v, e.Payload)
	}
	return writeJSON(c, http.StatusOK, v)
}

// writeWithPayload answers v, indented as writeJSON does, with payload (one
// valid JSON value) as its "payload" member byte for byte as it was stored.
// Not re-indented: indenting costs the square of the nesting depth (8 KB of
// brackets made a 32 MB answer), and the bytes as the provider sent and
// signed them are what ops come to see. The answer is the payload plus the
// event's own few fields.
func writeWithPayload(c echo.Context, status int, v EventView, payload []byte) error {
	v.Payload = nil
	head, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	head = bytes.TrimSuffix(head, []byte("\n}"))
	out := make([]byte, 0, len(head)+len(payload)+32)
	out = append(out, head...)
	out = append(out, ",\n  \"payload\": "...)
	out = append(out, payload...)
	out = append(out, "\n}\n"...)
	return c.Blob(status, echo.MIMEApplicationJSON, out)
}

func (s *Server) opsStats(c echo.Context) error {
	counts, err := inbox.Counts(c.Request().Context(), s.config.Pool)
	if err != nil {
		return err
	}
	sweeps, err := sweep.Statuses(c.Request().Context(), s.config.Pool)
	if err != nil {
		return err
	}
	return writeJSON(c, http.StatusOK, map[string]any{"events": counts, "sweep": sweepViews(sweeps)})
}

func (s *Server) healthz(c echo.Context) error {
	return writeJSON(c, http.StatusOK, map[string]string{"status": "ok"})
}

func (s *Server) readyz(c echo.Context) error {
	ok, err := migrations.Applied(c.Request().Context(), s.config.Pool)
	if err != nil || !ok {
		detail := "database not migrated: run `paygate migrate`"
		if err != nil {
			detail = "database unreachable"
		}
		return answerError(c, withDetail(ErrNotReady, detail))
	}
	return s.ready(c)
}

// writeJSON answers indented JSON: the API is read by people as often as by
// programs.
func writeJSON(c echo.Context, status int, v any) error {
	c.Response().Header().Set(echo.HeaderContentType, echo.MIMEApplicationJSON)
	c.Response().WriteHeader(status)
	return jsonEncode(c.Response(), v)
}

func jsonEncode(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
