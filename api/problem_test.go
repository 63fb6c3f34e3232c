package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/delivery"
	"github.com/paygate/paygate/inbox"
	"github.com/paygate/paygate/ledger"
	"github.com/paygate/paygate/outbox"
	"github.com/paygate/paygate/reconcile"
	"github.com/paygate/paygate/refund"
	"github.com/paygate/paygate/webhook"
)

type problemCase struct {
	err    error
	status int
	slug   string
	title  string
	detail string // "": the error's own text
}

// problemCases is every error the table answers, written out rather than
// read from the table, so that a changed row fails here.
var problemCases = []problemCase{
	{webhook.ErrMissingSignature, 400, "webhooks", "Invalid signature", ""},
	{webhook.ErrMalformedSignature, 400, "webhooks", "Invalid signature", ""},
	{webhook.ErrInvalidSignature, 400, "webhooks", "Invalid signature", ""},
	{webhook.ErrStaleTimestamp, 400, "webhooks", "Signature timestamp outside tolerance", ""},
	{webhook.ErrFutureTimestamp, 400, "webhooks", "Signature timestamp outside tolerance", ""},
	{webhook.ErrNotAnEvent, 400, "webhooks", "Not an event", ""},
	{webhook.ErrUnauthenticated, 401, "webhooks", "Webhook not authenticated", ""},
	{webhook.ErrUnknownSource, 404, "webhooks", "Unknown webhook source", ""},
	{webhook.ErrBodyTooLarge, 413, "webhooks", "Body too large", ""},
	{webhook.ErrNotConfigured, 503, "configuration", "Webhook secret not configured", ""},
	{webhook.ErrUnavailable, 503, "webhooks", "Database unavailable", "the event was not stored; retry later"},
	{ErrUnauthorized, 401, "authentication", "Unauthorized", ""},
	{ErrForbidden, 403, "authentication", "Forbidden", ""},
	{ErrTooManyFailures, 429, "authentication", "Too many failed authentications", ""},
	{ErrBadRequest, 400, "http-api", "Bad request", ""},
	{ErrIdempotencyKeyMissing, 400, "idempotency", "Idempotency-Key missing", ""},
	{ErrIdempotencyKeyInvalid, 400, "idempotency", "Idempotency-Key invalid", ""},
	{ErrIdempotencyKeyInUse, 409, "idempotency", "Idempotency-Key in use", ""},
	{ErrIdempotencyKeyReused, 422, "idempotency", "Idempotency-Key reused", ""},
	{ErrNotReady, 503, "operations", "Not ready", ""},
	{inbox.ErrNotFound, 404, "http-api", "Not found", ""},
	{inbox.ErrAlreadyProcessed, 409, "poison-queue", "Event already processed",
		"the event's effects are in the ledger; a processed event cannot be discarded"},
	{context.DeadlineExceeded, 503, "http-api", "Request timed out", "the request took longer than its time limit; retry later"},
	{ledger.ErrPaymentNotFound, 404, "http-api", "Not found", ""},
	{ledger.ErrNotFound, 404, "http-api", "Not found", ""},
	{ledger.ErrPeriodNotEnded, 409, "books", "Period cannot be closed", ""},
	{ledger.ErrPeriodOrder, 409, "books", "Period cannot be closed", ""},
	{ledger.ErrPeriodNotClosed, 409, "books", "Period not closed", ""},
	{ledger.ErrDoubleChargeNotFound, 404, "double-charges", "Double charge not found", ""},
	{ledger.ErrDoubleChargeNotOpen, 409, "double-charges", "Double charge not open", ""},
	{reconcile.ErrRunNotFound, 404, "reconciliation", "Not found", ""},
	{reconcile.ErrItemNotFound, 404, "exceptions", "Not found", ""},
	{reconcile.ErrInvalidResolution, 400, "exceptions", "Invalid resolution", ""},
	{reconcile.ErrNotException, 422, "exceptions", "Item is not an exception", ""},
	{reconcile.ErrNoDifference, 422, "exceptions", "Nothing to write off", ""},
	{reconcile.ErrAlreadyResolved, 409, "exceptions", "Item already resolved", ""},
	{reconcile.ErrWrittenOffOtherwise, 409, "exceptions", "Difference already written off", ""},
	{reconcile.ErrReportNotFound, 422, "reconciliation", "Settlement report not stored", ""},
	{reconcile.ErrUnavailable, 503, "reconciliation", "Reconciliation not available", ""},
	{refund.ErrPaymentNotFound, 404, "refunds", "Payment not found", ""},
	{refund.ErrRequestNotFound, 404, "refunds", "Refund request not found", ""},
	{refund.ErrExceedsRefundable, 422, "refund-exceeds-refundable", "Refund exceeds refundable amount", ""},
	{refund.ErrUnsupportedProvider, 422, "refunds", "Refunds not supported at this provider", ""},
	{refund.ErrInvalidRequest, 400, "refunds", "Invalid refund request", ""},
	{delivery.ErrEndpointNotFound, 404, "endpoints", "Endpoint not found", ""},
	{delivery.ErrDeliveryNotFound, 404, "endpoints", "Delivery not found", ""},
	{outbox.ErrNotFound, 404, "messages", "Message not found", ""},
	{delivery.ErrInvalidEndpoint, 400, "endpoints", "Invalid endpoint", ""},
	{delivery.ErrInvalidURL, 400, "endpoints", "Invalid endpoint", ""},
	{delivery.ErrForbiddenURL, 422, "endpoints", "Endpoint URL not allowed", ""},
	{delivery.ErrInvalidCursor, 400, "http-api", "Bad request", "cursor is not one this API handed out"},
	{outbox.ErrInvalidCursor, 400, "http-api", "Bad request", "cursor is not one this API handed out"},
	{errDeliveryUnavailable, 503, "endpoints", "Delivery not available", ""},
}

func TestProblemTable(t *testing.T) {
	t.Parallel()
	for _, tc := range problemCases {
		wrapped := fmt.Errorf("doing something: %w", tc.err)
		twice := fmt.Errorf("outer: %w", fmt.Errorf("inner %d: %w", 7, tc.err))
		for _, err := range []error{tc.err, wrapped, twice} {
			want := Problem{Type: typeURI(tc.slug), Title: tc.title, Status: tc.status, Detail: tc.detail}
			if want.Detail == "" {
				want.Detail = err.Error()
			}
			require.Equal(t, want, problemFor(err), "%v", err)
			require.Equal(t, tc.status, statusOf(err), "%v", err)
		}
	}
}

// TestProblemTableIsCovered: a row added to the table without a case above
// fails, so every answer is pinned.
func TestProblemTableIsCovered(t *testing.T) {
	t.Parallel()
	for _, row := range problemTable {
		for _, target := range row.errs {
			found := slices.ContainsFunc(problemCases, func(tc problemCase) bool {
				return tc.err == target //nolint:errorlint // the same sentinel, not one wrapping it
			})
			require.True(t, found, "%v is in the table but not in problemCases", target)
		}
	}
}

// TestProblemWithDetail: an answer that names what was asked for keeps the
// sentinel's status, type and title.
func TestProblemWithDetail(t *testing.T) {
	t.Parallel()
	err := withDetail(reconcile.ErrRunNotFound, `no reconciliation run has id "x"`)
	require.ErrorIs(t, err, reconcile.ErrRunNotFound)
	require.Equal(t, Problem{Type: typeURI("reconciliation"), Title: "Not found", Status: 404,
		Detail: `no reconciliation run has id "x"`}, problemFor(err))
	require.Equal(t, Problem{Type: typeURI("operations"), Title: "Not ready", Status: 503, Detail: "database unreachable"},
		problemFor(withDetail(ErrNotReady, "database unreachable")))
}

func TestProblemEchoErrors(t *testing.T) {
	t.Parallel()
	require.Equal(t, Problem{Type: "about:blank", Title: "Not Found", Status: 404, Detail: "Not Found"}, problemFor(echo.ErrNotFound))
	require.Equal(t, Problem{Type: "about:blank", Title: "Request Entity Too Large", Status: 413, Detail: "request body too large"},
		problemFor(echo.NewHTTPError(http.StatusRequestEntityTooLarge, "request body too large")))
}

// TestProblemUnknownErrors: an error the table does not know answers 500
// with the generic body, never its text (a database's message names tables,
// users, sometimes values), which goes to the log with the request id.
func TestProblemUnknownErrors(t *testing.T) {
	t.Parallel()
	secret := `pq: password authentication failed for user "paygate_secret"`
	for _, err := range []error{
		errors.New(secret),
		fmt.Errorf("read payment: %w", errors.New(secret)),
		fmt.Errorf("%s: %w", secret, ErrNoIdempotencyTx),
		context.Canceled,
	} {
		require.Equal(t, internalProblem, problemFor(err), "%v", err)
		require.Equal(t, http.StatusInternalServerError, statusOf(err))
	}

	var logs bytes.Buffer
	handler := ErrorHandler(slog.New(slog.NewTextHandler(&logs, nil)))
	e := echo.New()
	rec := httptest.NewRecorder()
	c := e.NewContext(httptest.NewRequest(http.MethodGet, "/v1/payments/pi_1", nil), rec)
	c.Response().Header().Set(echo.HeaderXRequestID, "req-123")
	handler(fmt.Errorf("get payment: %w", errors.New(secret)), c)

	require.Equal(t, http.StatusInternalServerError, rec.Code)
	require.Equal(t, "application/problem+json", rec.Header().Get(echo.HeaderContentType))
	var p Problem
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &p))
	require.Equal(t, internalProblem, p)
	require.NotContains(t, rec.Body.String(), "paygate_secret")
	require.Contains(t, logs.String(), "paygate_secret", "the text is logged")
	require.Contains(t, logs.String(), "req-123", "with the request id")
}

// TestProblemRendering: the error handler and answerError render the same
// body from the table; only the error handler adds Retry-After to a 503.
func TestProblemRendering(t *testing.T) {
	t.Parallel()
	e := echo.New()
	err := withDetail(ErrNotReady, "database unreachable")

	viaHandler := httptest.NewRecorder()
	ErrorHandler(slog.New(slog.DiscardHandler))(err, e.NewContext(httptest.NewRequest(http.MethodGet, "/readyz", nil), viaHandler))
	inline := httptest.NewRecorder()
	require.NoError(t, answerError(e.NewContext(httptest.NewRequest(http.MethodGet, "/readyz", nil), inline), err))

	for _, rec := range []*httptest.ResponseRecorder{viaHandler, inline} {
		require.Equal(t, http.StatusServiceUnavailable, rec.Code)
		require.Equal(t, "application/problem+json", rec.Header().Get(echo.HeaderContentType))
		require.JSONEq(t, `{"type":"`+docs+`docs/operations.md#operations","title":"Not ready","status":503,"detail":"database unreachable"}`, rec.Body.String())
	}
	require.Equal(t, "5", viaHandler.Header().Get("Retry-After"))
	require.Empty(t, inline.Header().Get("Retry-After"))

	head := httptest.NewRecorder()
	require.NoError(t, answerError(e.NewContext(httptest.NewRequest(http.MethodHead, "/readyz", nil), head), err))
	require.Equal(t, http.StatusServiceUnavailable, head.Code)
	require.Empty(t, head.Body.String())
}

// TestProblemsOnlyFromTheTable reads the package's source: writeProblem is
// called only by the error handler and answerError, and a Problem is built
// only in problem.go, so no answer is mapped beside the table.
func TestProblemsOnlyFromTheTable(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	fset := token.NewFileSet()
	callers := map[string]bool{}
	parsed := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		require.NoError(t, err)
		parsed++
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			ast.Inspect(decl, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.CallExpr:
					if id, isIdent := n.Fun.(*ast.Ident); isIdent && id.Name == "writeProblem" {
						require.True(t, ok, "%s: writeProblem called outside a function", fset.Position(n.Pos()))
						callers[fn.Name.Name] = true
						require.Contains(t, []string{"ErrorHandler", "answerError"}, fn.Name.Name,
							"%s: writeProblem called from %s; return an error (or answerError) and map it in problemTable",
							fset.Position(n.Pos()), fn.Name.Name)
					}
				case *ast.CompositeLit:
					if id, isIdent := n.Type.(*ast.Ident); isIdent && id.Name == "Problem" {
						require.Equal(t, "problem.go", name, "%s: a Problem built beside the table", fset.Position(n.Pos()))
					}
				}
				return true
			})
		}
	}
	require.Greater(t, parsed, 5, "the package's files were read")
	require.Equal(t, map[string]bool{"ErrorHandler": true, "answerError": true}, callers)
}
