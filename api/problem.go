package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/paygate/paygate/delivery"
	"github.com/paygate/paygate/inbox"
	"github.com/paygate/paygate/ledger"
	"github.com/paygate/paygate/outbox"
	"github.com/paygate/paygate/reconcile"
	"github.com/paygate/paygate/refund"
	"github.com/paygate/paygate/webhook"
)

// Problem is an RFC 9457 problem detail.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
}

// docs is where the guides are published: each problem type is the
// section of a guide that explains it.
const docs = "https://github.com/paygate/paygate/blob/main/"

// problemGuides names the guide whose section of that slug explains a
// problem type (TestProblemTypesAreGuideSections holds each to a heading).
var problemGuides = map[string]string{
	"webhooks":                  "docs/providers.md",
	"configuration":             "docs/configuration.md",
	"http-api":                  "docs/api.md",
	"authentication":            "docs/api.md",
	"idempotency":               "docs/api.md",
	"endpoints":                 "docs/downstream.md",
	"messages":                  "docs/downstream.md",
	"operations":                "docs/operations.md",
	"poison-queue":              "docs/operations.md",
	"refunds":                   "docs/operations.md",
	"refund-exceeds-refundable": "docs/operations.md",
	"double-charges":            "docs/operations.md",
	"reconciliation":            "docs/finance.md",
	"exceptions":                "docs/finance.md",
	"books":                     "docs/finance.md",
}

// typeURI is the problem type explained in the guides' section slug.
func typeURI(slug string) string { return docs + problemGuides[slug] + "#" + slug }

// Sentinel errors of the API itself.
var (
	ErrUnauthorized = errors.New("missing or unknown bearer token")
	ErrForbidden    = errors.New("this token's role may not do that")
	ErrBadRequest   = errors.New("bad request")
	// ErrNotReady: the database is unreachable or not migrated (/readyz).
	ErrNotReady = errors.New("not ready")
)

// problemType is one row of the error → status table: an error matching
// any of errs (errors.Is, so wrapped too) answers status with the problem
// type typeURI(slug) and title. The detail is the error's text, unless the row
// fixes one: there the text would say what only the logs should (a
// database's message) or less than the client needs.
type problemType struct {
	errs   []error
	status int
	slug   string
	title  string
	detail string
}

// problemTable is paygate's one error → status table, for every answer its
// HTTP surface gives to an error. First match wins, so a row for an error
// that wraps another must come before the other's.
var problemTable = []problemType{
	{errs: []error{webhook.ErrMissingSignature, webhook.ErrMalformedSignature, webhook.ErrInvalidSignature},
		status: http.StatusBadRequest, slug: "webhooks", title: "Invalid signature"},
	{errs: []error{webhook.ErrStaleTimestamp, webhook.ErrFutureTimestamp},
		status: http.StatusBadRequest, slug: "webhooks", title: "Signature timestamp outside tolerance"},
	{errs: []error{webhook.ErrNotAnEvent}, status: http.StatusBadRequest, slug: "webhooks", title: "Not an event"},
	{errs: []error{webhook.ErrUnauthenticated}, status: http.StatusUnauthorized, slug: "webhooks", title: "Webhook not authenticated"},
	{errs: []error{webhook.ErrUnknownSource}, status: http.StatusNotFound, slug: "webhooks", title: "Unknown webhook source"},
	{errs: []error{webhook.ErrBodyTooLarge}, status: http.StatusRequestEntityTooLarge, slug: "webhooks", title: "Body too large"},
	{errs: []error{webhook.ErrNotConfigured}, status: http.StatusServiceUnavailable, slug: "configuration", title: "Webhook secret not configured"},
	{errs: []error{webhook.ErrUnavailable}, status: http.StatusServiceUnavailable, slug: "webhooks", title: "Database unavailable",
		detail: "the event was not stored; retry later"},

	{errs: []error{ErrUnauthorized}, status: http.StatusUnauthorized, slug: "authentication", title: "Unauthorized"},
	{errs: []error{ErrTooManyFailures}, status: http.StatusTooManyRequests, slug: "authentication", title: "Too many failed authentications"},
	{errs: []error{ErrForbidden}, status: http.StatusForbidden, slug: "authentication", title: "Forbidden"},
	{errs: []error{ErrBadRequest}, status: http.StatusBadRequest, slug: "http-api", title: "Bad request"},
	{errs: []error{ErrIdempotencyKeyMissing}, status: http.StatusBadRequest, slug: "idempotency", title: "Idempotency-Key missing"},
	{errs: []error{ErrIdempotencyKeyInvalid}, status: http.StatusBadRequest, slug: "idempotency", title: "Idempotency-Key invalid"},
	{errs: []error{ErrIdempotencyKeyInUse}, status: http.StatusConflict, slug: "idempotency", title: "Idempotency-Key in use"},
	{errs: []error{ErrIdempotencyKeyReused}, status: http.StatusUnprocessableEntity, slug: "idempotency", title: "Idempotency-Key reused"},
	{errs: []error{ErrNotReady}, status: http.StatusServiceUnavailable, slug: "operations", title: "Not ready"},

	{errs: []error{inbox.ErrNotFound}, status: http.StatusNotFound, slug: "http-api", title: "Not found"},
	{errs: []error{inbox.ErrAlreadyProcessed}, status: http.StatusConflict, slug: "poison-queue", title: "Event already processed",
		detail: "the event's effects are in the ledger; a processed event cannot be discarded"},
	// A request's own bound (Config.RequestTimeout) ran out.
	{errs: []error{context.DeadlineExceeded}, status: http.StatusServiceUnavailable, slug: "http-api", title: "Request timed out",
		detail: "the request took longer than its time limit; retry later"},

	{errs: []error{ledger.ErrPaymentNotFound, ledger.ErrNotFound}, status: http.StatusNotFound, slug: "http-api", title: "Not found"},
	{errs: []error{ledger.ErrPeriodNotEnded, ledger.ErrPeriodOrder}, status: http.StatusConflict, slug: "books",
		title: "Period cannot be closed"},
	{errs: []error{ledger.ErrPeriodNotClosed}, status: http.StatusConflict, slug: "books", title: "Period not closed"},
	{errs: []error{ledger.ErrDoubleChargeNotFound}, status: http.StatusNotFound, slug: "double-charges",
		title: "Double charge not found"},
	{errs: []error{ledger.ErrDoubleChargeNotOpen}, status: http.StatusConflict, slug: "double-charges",
		title: "Double charge not open"},
	{errs: []error{reconcile.ErrRunNotFound}, status: http.StatusNotFound, slug: "reconciliation", title: "Not found"},
	{errs: []error{reconcile.ErrItemNotFound}, status: http.StatusNotFound, slug: "exceptions", title: "Not found"},
	{errs: []error{reconcile.ErrInvalidResolution}, status: http.StatusBadRequest, slug: "exceptions", title: "Invalid resolution"},
	{errs: []error{reconcile.ErrNotException}, status: http.StatusUnprocessableEntity, slug: "exceptions",
		title: "Item is not an exception"},
	{errs: []error{reconcile.ErrNoDifference}, status: http.StatusUnprocessableEntity, slug: "exceptions",
		title: "Nothing to write off"},
	{errs: []error{reconcile.ErrAlreadyResolved}, status: http.StatusConflict, slug: "exceptions", title: "Item already resolved"},
	{errs: []error{reconcile.ErrWrittenOffOtherwise}, status: http.StatusConflict, slug: "exceptions",
		title: "Difference already written off"},
	// A batch is reconciled from its report: none stored, nothing to run.
	{errs: []error{reconcile.ErrReportNotFound}, status: http.StatusUnprocessableEntity, slug: "reconciliation",
		title: "Settlement report not stored"},
	// The server's configuration, not the request, is at fault: 503, as
	// for a webhook endpoint without its secret.
	{errs: []error{reconcile.ErrUnavailable}, status: http.StatusServiceUnavailable, slug: "reconciliation",
		title: "Reconciliation not available"},
	{errs: []error{refund.ErrPaymentNotFound}, status: http.StatusNotFound, slug: "refunds", title: "Payment not found"},
	{errs: []error{refund.ErrRequestNotFound}, status: http.StatusNotFound, slug: "refunds", title: "Refund request not found"},
	{errs: []error{refund.ErrExceedsRefundable}, status: http.StatusUnprocessableEntity, slug: "refund-exceeds-refundable",
		title: "Refund exceeds refundable amount"},
	{errs: []error{refund.ErrUnsupportedProvider}, status: http.StatusUnprocessableEntity, slug: "refunds",
		title: "Refunds not supported at this provider"},
	{errs: []error{refund.ErrInvalidRequest}, status: http.StatusBadRequest, slug: "refunds", title: "Invalid refund request"},

	{errs: []error{delivery.ErrEndpointNotFound}, status: http.StatusNotFound, slug: "endpoints", title: "Endpoint not found"},
	{errs: []error{delivery.ErrDeliveryNotFound}, status: http.StatusNotFound, slug: "endpoints", title: "Delivery not found"},
	{errs: []error{outbox.ErrNotFound}, status: http.StatusNotFound, slug: "messages", title: "Message not found"},
	{errs: []error{delivery.ErrInvalidEndpoint, delivery.ErrInvalidURL}, status: http.StatusBadRequest, slug: "endpoints",
		title: "Invalid endpoint"},
	{errs: []error{delivery.ErrForbiddenURL}, status: http.StatusUnprocessableEntity, slug: "endpoints",
		title: "Endpoint URL not allowed"},
	{errs: []error{delivery.ErrInvalidCursor, outbox.ErrInvalidCursor}, status: http.StatusBadRequest, slug: "http-api",
		title: "Bad request", detail: "cursor is not one this API handed out"},
	{errs: []error{errDeliveryUnavailable}, status: http.StatusServiceUnavailable, slug: "endpoints",
		title: "Delivery not available"},
}

// errDeliveryUnavailable answers the endpoint routes of a server built
// without a delivery store.
var errDeliveryUnavailable = errors.New("this server does not deliver messages")

// internalProblem answers every error the table does not know: its text is
// for the log, never for the client.
var internalProblem = Problem{Type: "about:blank", Title: "Internal Server Error", Status: http.StatusInternalServerError,
	Detail: "an unexpected error occurred; it has been logged with the request id"}

// problemFor answers err from problemTable; Echo's own errors (no route, a
// method not allowed, a body too large for the middleware) keep Echo's
// status; anything else is internalProblem.
func problemFor(err error) Problem {
	for _, row := range problemTable {
		for _, target := range row.errs {
			if errors.Is(err, target) {
				p := Problem{Type: typeURI(row.slug), Title: row.title, Status: row.status, Detail: row.detail}
				if p.Detail == "" {
					p.Detail = err.Error()
				}
				return p
			}
		}
	}
	var he *echo.HTTPError
	if errors.As(err, &he) {
		return Problem{Type: "about:blank", Title: http.StatusText(he.Code), Status: he.Code, Detail: fmt.Sprint(he.Message)}
	}
	return internalProblem
}

func statusOf(err error) int { return problemFor(err).Status }

// withDetail returns an error that answers like sentinel with detail as its
// problem's detail, for answers that name what the request asked for.
func withDetail(sentinel error, detail string) error {
	return &detailedError{sentinel: sentinel, detail: detail}
}

type detailedError struct {
	sentinel error
	detail   string
}

func (e *detailedError) Error() string { return e.detail }
func (e *detailedError) Unwrap() error { return e.sentinel }

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

// answerError writes err's answer from the table as the handler's own
// response rather than as a failure: under an Idempotency-Key it is stored
// and replayed like a success (a failure releases the key instead), and it
// is neither logged nor given a Retry-After (a readiness probe's 503 is an
// answer, not an incident).
func answerError(c echo.Context, err error) error {
	return writeProblem(c, problemFor(err))
}

// writeProblem renders a problem. Only ErrorHandler and answerError call it
// (problem_test.go checks), so that no answer bypasses the table.
func writeProblem(c echo.Context, p Problem) error {
	if c.Request().Method == http.MethodHead {
		return c.NoContent(p.Status)
	}
	c.Response().Header().Set(echo.HeaderContentType, "application/problem+json")
	c.Response().WriteHeader(p.Status)
	return jsonEncode(c.Response(), p)
}
