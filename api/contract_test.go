package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/api"
)

// Every Echo instance this package's tests build goes through newAPI, which
// installs a contract check: each request and each answer is validated
// against the served OpenAPI document (api.OpenAPI) with kin-openapi's
// openapi3filter, which validates OpenAPI 3.1 schemas as JSON Schema
// 2020-12. An answer whose status, content type, headers or body the
// document does not describe (response schemas are closed where the
// server's structs are fixed, so an extra field counts) fails the test that
// made the request. The check is driven by the document alone: a route
// added later is covered as soon as it is served and documented, and fails
// every test that calls it until it is documented.
//
// A request the document forbids is a failure only when the server accepts
// it (answers other than 4xx): tests that send malformed requests on
// purpose (hostile bodies, bad keys, unknown filters) get their refusal,
// and that refusal's answer is still validated. A test whose point is a
// request the document forbids and the server nonetheless accepts says so
// with contractOf(t, e).allowInvalidRequests(why).

// undocumentedByDesign reports whether a path belongs to a tool mounted
// beside the API with a protocol of its own, which api/openapi.json does not
// describe: River's UI and Go's profiler (api/pprof.go).
func undocumentedByDesign(path string) bool {
	for _, prefix := range []string{"/riverui", "/debug/pprof"} {
		if path == prefix || strings.HasPrefix(path, prefix+"/") {
			return true
		}
	}
	return false
}

type contract struct {
	router  routers.Router
	problem *openapi3.SchemaRef
}

// loadContract parses the embedded document once for the whole package.
var loadContract = sync.OnceValues(func() (*contract, error) {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(api.OpenAPI)
	if err != nil {
		return nil, fmt.Errorf("load api/openapi.json: %w", err)
	}
	if err := doc.Validate(loader.Context); err != nil {
		return nil, fmt.Errorf("api/openapi.json is not a valid OpenAPI document: %w", err)
	}
	// Tests reach the server at whatever address httptest gives it; the
	// document's servers name where a deployment listens, so routing
	// ignores them.
	routed := *doc
	routed.Servers = nil
	router, err := gorillamux.NewRouter(&routed)
	if err != nil {
		return nil, fmt.Errorf("route api/openapi.json: %w", err)
	}
	problem := doc.Components.Schemas["Problem"]
	if problem == nil {
		return nil, errors.New("api/openapi.json has no components.schemas.Problem")
	}
	return &contract{router: router, problem: problem}, nil
})

// contractChecker validates what goes through one Echo instance.
type contractChecker struct {
	t        testing.TB
	contract *contract

	mu sync.Mutex
	// invalidRequestsAllowed is why requests the document forbids may be
	// accepted here; "" when they may not.
	invalidRequestsAllowed string
}

var (
	checkersMu sync.Mutex
	checkers   = map[*echo.Echo]*contractChecker{}
)

// newAPI is api.NewEcho with the contract check installed. Every test of
// this package builds its server through it (TestEveryServerIsContractChecked
// makes sure).
func newAPI(t testing.TB, cfg api.Config) (*echo.Echo, *api.Server) {
	t.Helper()
	c, err := loadContract()
	require.NoError(t, err)
	e, s := api.NewEcho(cfg)
	cc := &contractChecker{t: t, contract: c}
	// Pre: outermost, before routing, so the check sees every request,
	// matched or not, and the answer as the client gets it, errors
	// rendered by the HTTPErrorHandler included.
	e.Pre(cc.middleware)
	checkersMu.Lock()
	checkers[e] = cc
	checkersMu.Unlock()
	t.Cleanup(func() {
		checkersMu.Lock()
		delete(checkers, e)
		checkersMu.Unlock()
	})
	return e, s
}

// contractOf is the check installed on e by newAPI.
func contractOf(t testing.TB, e *echo.Echo) *contractChecker {
	t.Helper()
	checkersMu.Lock()
	defer checkersMu.Unlock()
	cc, ok := checkers[e]
	require.True(t, ok, "this Echo was not built by newAPI")
	return cc
}

// allowInvalidRequests lets requests the document forbids through the
// check even when the server accepts them; their answers are still
// validated. why says what the test proves with them.
func (cc *contractChecker) allowInvalidRequests(why string) {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	cc.invalidRequestsAllowed = why
}

func (cc *contractChecker) middleware(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		req := c.Request()
		var reqBody []byte
		if req.Body != nil && req.Body != http.NoBody {
			var err error
			if reqBody, err = io.ReadAll(req.Body); err != nil {
				cc.t.Errorf("contract: read the request body of %s %s: %v", req.Method, req.URL.Path, err)
			}
			req.Body = io.NopCloser(bytes.NewReader(reqBody))
		}
		// The request as the client sent it: handlers may replace it (a
		// context with a deadline) by the time the answer is checked.
		sent := req.Clone(context.Background())
		if _, person := api.PersonOf(req.Context()); person && sent.Header.Get(echo.HeaderAuthorization) == "" {
			// The console's in-process request for a person is
			// authenticated by its context, not a header: checked as
			// the bearer request the document describes.
			sent.Header.Set(echo.HeaderAuthorization, "Bearer person")
		}

		res := c.Response()
		capture := &capturingWriter{ResponseWriter: res.Writer}
		res.Writer = capture
		defer func() { res.Writer = capture.ResponseWriter }()

		if err := next(c); err != nil {
			// What Echo's ServeHTTP does with it, done here so that the
			// answer checked is the one rendered.
			c.Error(err)
		}
		cc.check(sent, reqBody, capture)
		return nil
	}
}

func (cc *contractChecker) check(req *http.Request, reqBody []byte, res *capturingWriter) {
	status := res.status
	if status == 0 {
		status = http.StatusOK // nothing written: net/http answers 200
	}
	header := res.header
	if header == nil {
		header = res.Header().Clone()
	}
	where := fmt.Sprintf("contract: %s %s → %d", req.Method, req.URL.RequestURI(), status)
	refused := status >= 400 && status < 500

	ctx := context.Background()
	route, pathParams, err := cc.contract.router.FindRoute(req)
	if err != nil {
		switch {
		case undocumentedByDesign(req.URL.Path):
		case refused:
			// No such route (or method) in the document, and the server
			// refuses it too; its refusal is still a problem.
			cc.checkProblem(where, req, header, res.body.Bytes())
		default:
			cc.t.Errorf("%s: the server answers a route api/openapi.json does not have (%v)", where, err)
		}
		return
	}

	reqInput := &openapi3filter.RequestValidationInput{
		Request:    req,
		PathParams: pathParams,
		Route:      route,
		Options: &openapi3filter.Options{
			MultiError:                        true,
			SkipSettingDefaults:               true,
			RejectWhenRequestBodyNotSpecified: true,
			AuthenticationFunc:                bearerPresent,
		},
	}
	req.Body = io.NopCloser(bytes.NewReader(reqBody))
	if err := openapi3filter.ValidateRequest(ctx, reqInput); err != nil && !refused {
		cc.mu.Lock()
		allowed := cc.invalidRequestsAllowed
		cc.mu.Unlock()
		if allowed == "" {
			cc.t.Errorf("%s: the server accepted a request api/openapi.json forbids: %v", where, err)
		}
	}

	resInput := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: reqInput,
		Status:                 status,
		Header:                 header,
		Options:                &openapi3filter.Options{MultiError: true, IncludeResponseStatus: true},
	}
	resInput.SetBodyBytes(res.body.Bytes())
	if err := openapi3filter.ValidateResponse(ctx, resInput); err != nil {
		cc.t.Errorf("%s: the answer does not match api/openapi.json: %v\nbody: %s", where, err, truncate(res.body.Bytes()))
		return
	}
	// openapi3filter lets an answer with a body through when the document
	// gives the status no content at all.
	if req.Method != http.MethodHead && res.body.Len() > 0 {
		if doc := route.Operation.Responses.Status(status); doc != nil && doc.Value != nil && len(doc.Value.Content) == 0 {
			cc.t.Errorf("%s: the answer has a body (%s) the document does not describe", where, header.Get(echo.HeaderContentType))
		}
	}
}

// checkProblem validates an error answer of an undocumented route against
// the Problem schema: every error paygate gives is problem+json.
func (cc *contractChecker) checkProblem(where string, req *http.Request, header http.Header, body []byte) {
	if req.Method == http.MethodHead {
		return
	}
	if ct := header.Get(echo.HeaderContentType); ct != "application/problem+json" {
		cc.t.Errorf("%s: an error answered as %q, not application/problem+json", where, ct)
		return
	}
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		cc.t.Errorf("%s: the problem is not JSON: %v", where, err)
		return
	}
	if err := cc.contract.problem.Value.VisitJSON(v, openapi3.EnableJSONSchema2020()); err != nil {
		cc.t.Errorf("%s: the problem does not match components.schemas.Problem: %v", where, err)
	}
}

// bearerPresent is the document's security check as a client sees it: an
// operation that needs a bearer token gets an Authorization: Bearer header.
// Whether the token is good is the server's business.
func bearerPresent(_ context.Context, in *openapi3filter.AuthenticationInput) error {
	scheme := in.SecurityScheme
	if scheme.Type != "http" || !strings.EqualFold(scheme.Scheme, "bearer") {
		return fmt.Errorf("security scheme %s: the contract check knows only http bearer", in.SecuritySchemeName)
	}
	auth := in.RequestValidationInput.Request.Header.Get(echo.HeaderAuthorization)
	if scheme, token, ok := strings.Cut(auth, " "); !ok || !strings.EqualFold(scheme, "bearer") || token == "" {
		return errors.New("no bearer token")
	}
	return nil
}

func truncate(b []byte) string {
	const max = 2048
	if len(b) > max {
		return string(b[:max]) + "…"
	}
	return string(b)
}

// capturingWriter keeps a copy of the status, the headers as they were
// sent, and the body.
type capturingWriter struct {
	http.ResponseWriter
	status int
	header http.Header
	body   bytes.Buffer
}

func (w *capturingWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
		w.header = w.ResponseWriter.Header().Clone()
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *capturingWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	w.body.Write(b)
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection (write
// deadlines, flushes) through the capture.
func (w *capturingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *capturingWriter) Flush() {
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// TestEveryServerIsContractChecked reads this package's tests: none builds
// an Echo instance but through newAPI, so none escapes the contract check.
// (The package's internal tests, which cannot reach newAPI, build no
// server: they use echo.New only for contexts.)
func TestEveryServerIsContractChecked(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("*_test.go")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	fset := token.NewFileSet()
	for _, name := range files {
		f, err := parser.ParseFile(fset, name, nil, 0)
		require.NoError(t, err)
		external := f.Name.Name == "api_test"
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.FuncDecl:
				return !(n.Name.Name == "newAPI" && n.Recv == nil) // the one place allowed
			case *ast.Ident:
				if !external && n.Name == "NewEcho" {
					t.Errorf("%s: NewEcho in an internal test: its server escapes the contract check; test it from api_test with newAPI", fset.Position(n.Pos()))
				}
			case *ast.SelectorExpr:
				x, ok := n.X.(*ast.Ident)
				if !ok || !external {
					return true
				}
				if x.Name == "api" && n.Sel.Name == "NewEcho" {
					t.Errorf("%s: api.NewEcho outside newAPI: the server it builds escapes the contract check", fset.Position(n.Pos()))
				}
				if x.Name == "echo" && n.Sel.Name == "New" {
					t.Errorf("%s: echo.New in a test: build the server with newAPI", fset.Position(n.Pos()))
				}
			}
			return true
		})
	}
}

// recordingTB keeps the failures reported to it instead of failing.
type recordingTB struct {
	testing.TB
	mu     sync.Mutex
	errors []string
}

func (r *recordingTB) Helper() {}

func (r *recordingTB) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}

func (r *recordingTB) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.errors
	r.errors = nil
	return out
}

// TestContractCheckCatchesDrift: handlers that answer what the document
// does not say (put in place of the real ones) fail the check, each for its
// reason, and what the document does say passes.
func TestContractCheckCatchesDrift(t *testing.T) {
	t.Parallel()
	rec := &recordingTB{TB: t}
	e, _ := newAPI(rec, api.Config{OpsTokens: []string{opsTok}})
	problem := func(status int) echo.HandlerFunc {
		return func(c echo.Context) error {
			return c.Blob(status, "application/problem+json", []byte(fmt.Sprintf(`{"type":"about:blank","title":"x","status":%d}`, status)))
		}
	}
	replayed := func(c echo.Context) error {
		return c.JSON(http.StatusAccepted, map[string]any{"matched": 1, "replayed": 1, "dry_run": false})
	}
	for _, c := range []struct {
		name, method, path, token, body string
		handler                         echo.HandlerFunc // replaces the route's; nil keeps the real one
		want                            string           // in the failure; "" for none
	}{
		{name: "documented answer", method: http.MethodGet, path: "/healthz"},
		{name: "a problem for a route the document lacks", method: http.MethodGet, path: "/nowhere"},
		{name: "refused request the document forbids", method: http.MethodPost, path: "/v1/ops/replay", token: opsTok,
			body: `{"status":"poison","colour":"red"}`, handler: problem(http.StatusBadRequest)},
		{name: "undocumented field", method: http.MethodGet, path: "/healthz",
			handler: func(c echo.Context) error { return c.JSON(http.StatusOK, map[string]any{"status": "ok", "uptime": 3}) },
			want:    "does not match"},
		{name: "undocumented status", method: http.MethodGet, path: "/healthz", handler: problem(http.StatusTeapot),
			want: "status is not supported"},
		{name: "undocumented content type", method: http.MethodGet, path: "/healthz",
			handler: func(c echo.Context) error { return c.HTML(http.StatusOK, "<p>ok</p>") }, want: "text/html"},
		{name: "wrong type", method: http.MethodGet, path: "/v1/ops/stats", token: opsTok,
			handler: func(c echo.Context) error {
				return c.JSON(http.StatusOK, map[string]any{"events": map[string]any{"received": "1", "processed": 0, "ignored": 0, "poison": 0, "discarded": 0}})
			}, want: "does not match"},
		{name: "undocumented route", method: http.MethodGet, path: "/v1/secret", token: opsTok,
			handler: func(c echo.Context) error { return c.JSON(http.StatusOK, map[string]any{}) }, want: "does not have"},
		{name: "accepted request the document forbids", method: http.MethodPost, path: "/v1/ops/replay", token: opsTok,
			body: `{"status":"poison","colour":"red"}`, handler: replayed, want: "accepted a request"},
		{name: "accepted request without a token", method: http.MethodPost, path: "/v1/ops/replay",
			body: `{"status":"poison"}`, handler: replayed, want: "accepted a request"},
		{name: "an error that is not a problem", method: http.MethodGet, path: "/elsewhere",
			handler: func(c echo.Context) error { return c.String(http.StatusNotFound, "no") }, want: "not application/problem+json"},
	} {
		if c.handler != nil {
			e.Add(c.method, c.path, c.handler)
		}
		req := httptest.NewRequest(c.method, c.path, strings.NewReader(c.body))
		if c.body != "" {
			req.Header.Set(echo.HeaderContentType, echo.MIMEApplicationJSON)
		}
		if c.token != "" {
			req.Header.Set(echo.HeaderAuthorization, "Bearer "+c.token)
		}
		if c.method == http.MethodPost {
			req.Header.Set(api.HeaderIdempotencyKey, "drift-"+strings.ReplaceAll(c.name, " ", "-"))
		}
		e.ServeHTTP(httptest.NewRecorder(), req)
		got := rec.take()
		if c.want == "" {
			require.Empty(t, got, c.name)
			continue
		}
		require.Len(t, got, 1, c.name)
		require.Contains(t, got[0], c.want, c.name)
	}

	// A test that forbids nothing of its requests lets them through; the
	// answers are still checked.
	contractOf(t, e).allowInvalidRequests("this test proves the opt-out")
	req := httptest.NewRequest(http.MethodPost, "/v1/ops/replay", strings.NewReader(`{"colour":"red"}`))
	req.Header.Set(echo.HeaderContentType, echo.MIMEApplicationJSON)
	req.Header.Set(echo.HeaderAuthorization, "Bearer "+opsTok)
	e.ServeHTTP(httptest.NewRecorder(), req)
	require.Empty(t, rec.take())
}
