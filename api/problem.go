package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/paygate/paygate/inbox"
	"github.com/paygate/paygate/webhook"
)

// Problem is an RFC 9457 problem detail.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
}

// docs is where each problem type is explained.
const docs = "https://github.com/paygate/paygate/blob/main/README.md"

// Sentinel errors of the API itself.
var (
	ErrUnauthorized = errors.New("missing or unknown bearer token")
	ErrForbidden    = errors.New("this token's role may not do that")
	ErrBadRequest   = errors.New("bad request")
)

// problemFor is the one error → status table of paygate's HTTP surface.
func problemFor(err error) Problem {
	p := func(status int, slug, title string) Problem {
		return Problem{Type: docs + "#" + slug, Title: title, Status: status, Detail: err.Error()}
	}
	var he *echo.HTTPError
	switch {
	case errors.Is(err, webhook.ErrMissingSignature),
		errors.Is(err, webhook.ErrMalformedSignature),
		errors.Is(err, webhook.ErrInvalidSignature):
		return p(http.StatusBadRequest, "webhooks", "Invalid signature")
	case errors.Is(err, webhook.ErrStaleTimestamp), errors.Is(err, webhook.ErrFutureTimestamp):
		return p(http.StatusBadRequest, "webhooks", "Signature timestamp outside tolerance")
	case errors.Is(err, webhook.ErrNotAnEvent):
		return p(http.StatusBadRequest, "webhooks", "Not an event")
	case errors.Is(err, webhook.ErrUnauthenticated):
		return p(http.StatusUnauthorized, "webhooks", "Webhook not authenticated")
	case errors.Is(err, webhook.ErrUnknownSource):
		return p(http.StatusNotFound, "webhooks", "Unknown webhook source")
	case errors.Is(err, webhook.ErrBodyTooLarge):
		return p(http.StatusRequestEntityTooLarge, "webhooks", "Body too large")
	case errors.Is(err, webhook.ErrNotConfigured):
		return p(http.StatusServiceUnavailable, "configuration", "Webhook secret not configured")
	case errors.Is(err, webhook.ErrUnavailable):
		return Problem{Type: docs + "#webhooks", Title: "Database unavailable", Status: http.StatusServiceUnavailable,
			Detail: "the event was not stored; retry later"}
	case errors.Is(err, ErrUnauthorized):
		return p(http.StatusUnauthorized, "authentication", "Unauthorized")
	case errors.Is(err, ErrForbidden):
		return p(http.StatusForbidden, "authentication", "Forbidden")
	case errors.Is(err, ErrBadRequest):
		return p(http.StatusBadRequest, "http-api", "Bad request")
	case errors.Is(err, inbox.ErrNotFound):
		return p(http.StatusNotFound, "http-api", "Not found")
	case errors.Is(err, context.DeadlineExceeded):
		// A request's own bound (Config.RequestTimeout) ran out.
		return Problem{Type: docs + "#http-api", Title: "Request timed out", Status: http.StatusServiceUnavailable,
			Detail: "the request took longer than its time limit; retry later"}
	case errors.As(err, &he):
		return Problem{Type: "about:blank", Title: http.StatusText(he.Code), Status: he.Code, Detail: fmt.Sprint(he.Message)}
	}
	if extra, ok := problemForDomain(err); ok {
		return extra
	}
	return Problem{Type: "about:blank", Title: "Internal Server Error", Status: http.StatusInternalServerError,
		Detail: "an unexpected error occurred; it has been logged with the request id"}
}

func statusOf(err error) int { return problemFor(err).Status }

// ErrorHandler answers every error as problem+json. Unexpected errors are
// logged with the request id and answered with a generic body.
func ErrorHandler(logger *slog.Logger) echo.HTTPErrorHandler {
	return func(err error, c echo.Context) {
		if c.Response().Committed {
			return
		}
		p := problemFor(err)
		if p.Status >= 500 && !errors.Is(err, context.Canceled) {
			logger.ErrorContext(c.Request().Context(), "request failed",
				"route", c.Path(), "status", p.Status, "error", err.Error(),
				"request_id", c.Response().Header().Get(echo.HeaderXRequestID))
		}
		if p.Status == http.StatusServiceUnavailable {
			c.Response().Header().Set("Retry-After", "5")
		}
		if err := writeProblem(c, p); err != nil {
			logger.ErrorContext(c.Request().Context(), "write problem", "error", err.Error())
		}
	}
}

func writeProblem(c echo.Context, p Problem) error {
	if c.Request().Method == http.MethodHead {
		return c.NoContent(p.Status)
	}
	c.Response().Header().Set(echo.HeaderContentType, "application/problem+json")
	c.Response().WriteHeader(p.Status)
	return jsonEncode(c.Response(), p)
}
