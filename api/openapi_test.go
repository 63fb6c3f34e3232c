package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/api"
	"github.com/paygate/paygate/provider"
	"github.com/paygate/paygate/provider/adyen"
	"github.com/paygate/paygate/provider/stripe"
	"github.com/paygate/paygate/webhook"
)

type openAPIDoc struct {
	OpenAPI string                                `json:"openapi"`
	Paths   map[string]map[string]json.RawMessage `json:"paths"`
}

type openAPIOperation struct {
	OperationID string                `json:"operationId"`
	Security    []map[string][]string `json:"security"`
	Roles       []string              `json:"x-roles"`
	Parameters  []struct {
		Ref  string `json:"$ref"`
		Name string `json:"name"`
		In   string `json:"in"`
	} `json:"parameters"`
	Responses map[string]json.RawMessage `json:"responses"`
}

var echoParam = regexp.MustCompile(`:([A-Za-z0-9_]+)`)

// wiredEcho is the API as `paygate serve` builds it: NewEcho with River's
// UI, plus the webhook routes.
func wiredEcho(t *testing.T) *opsBundle {
	t.Helper()
	b := setupOps(t, func(c *api.Config) { c.RiverUI = true })
	webhook.NewHandler(webhook.Config{
		Ingester:  &webhook.TxIngester{Pool: b.pool, Enqueue: b.jobs},
		Receivers: []provider.Receiver{stripe.NewReceiver([]string{"whsec_openapi_test"}, 0), adyenReceiver(t)},
	}).Register(b.echo)
	return b
}

func registeredRoutes(e *echo.Echo) map[string]bool {
	out := map[string]bool{}
	for _, r := range e.Routes() {
		if r.Method == echo.RouteNotFound || undocumentedByDesign(r.Path) {
			continue // group catch-alls; River UI's and Go's profiler's own protocols
		}
		out[r.Method+" "+echoParam.ReplaceAllString(r.Path, "{$1}")] = true
	}
	return out
}

func documentedRoutes(t *testing.T, doc openAPIDoc) map[string]openAPIOperation {
	t.Helper()
	out := map[string]openAPIOperation{}
	for path, item := range doc.Paths {
		for method, raw := range item {
			if method == "parameters" || method == "summary" || method == "description" {
				continue
			}
			var op openAPIOperation
			require.NoError(t, json.Unmarshal(raw, &op), "%s %s", method, path)
			out[strings.ToUpper(method)+" "+path] = op
		}
	}
	return out
}

func loadOpenAPI(t *testing.T, b *opsBundle) openAPIDoc {
	t.Helper()
	rec := b.do(t, http.MethodGet, "/openapi.json", "", "", "")
	require.Equal(t, http.StatusOK, rec.Code, "served without authentication")
	require.Equal(t, echo.MIMEApplicationJSON, rec.Header().Get(echo.HeaderContentType))
	require.Equal(t, api.OpenAPI, rec.Body.Bytes())
	var doc openAPIDoc
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &doc))
	require.True(t, strings.HasPrefix(doc.OpenAPI, "3."), "an OpenAPI 3 document")
	return doc
}

// TestOpenAPIDocumentsExactlyTheRegisteredRoutes fails when a route is
// registered but not documented, or documented but not registered.
func TestOpenAPIDocumentsExactlyTheRegisteredRoutes(t *testing.T) {
	t.Parallel()
	b := wiredEcho(t)
	doc := loadOpenAPI(t, b)
	registered := registeredRoutes(b.echo)
	documented := documentedRoutes(t, doc)

	var undocumented, unregistered []string
	for r := range registered {
		if _, ok := documented[r]; !ok {
			undocumented = append(undocumented, r)
		}
	}
	for r := range documented {
		if !registered[r] {
			unregistered = append(unregistered, r)
		}
	}
	sort.Strings(undocumented)
	sort.Strings(unregistered)
	require.Empty(t, undocumented, "registered routes missing from api/openapi.json")
	require.Empty(t, unregistered, "documented routes that no handler serves")
	require.Contains(t, registered, "POST /v1/ops/events/{provider}/{event_id}/replay", "the walk sees parameterised routes")
}

// TestOpenAPIDocumentIsConsistent: references resolve, path parameters are
// declared, every operation has a camelCase operationId of its own (a
// generated client's method names: renaming one breaks clients), a route
// with path parameters documents its 404, every /v1 operation names its
// roles and its 401/403/429/500/503, every POST under /v1 requires an
// Idempotency-Key and documents 400/409/413/422; and the roles documented
// are the roles the server enforces.
func TestOpenAPIDocumentIsConsistent(t *testing.T) {
	t.Parallel()
	b := wiredEcho(t)
	doc := loadOpenAPI(t, b)

	var whole map[string]any
	require.NoError(t, json.Unmarshal(api.OpenAPI, &whole))
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if ref, ok := v["$ref"].(string); ok {
				require.True(t, strings.HasPrefix(ref, "#/"), ref)
				var cur any = whole
				for _, part := range strings.Split(strings.TrimPrefix(ref, "#/"), "/") {
					m, ok := cur.(map[string]any)
					require.True(t, ok, "unresolvable $ref %s", ref)
					cur, ok = m[part]
					require.True(t, ok, "unresolvable $ref %s", ref)
				}
			}
			for _, x := range v {
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(whole)

	tokens := map[string]string{"ops": opsTok, "finance": financeTok}
	registered := registeredRoutes(b.echo)
	operationIDs := map[string]string{}
	for route, op := range documentedRoutes(t, doc) {
		method, path, _ := strings.Cut(route, " ")
		require.NotEmpty(t, op.Responses, route)
		require.Regexp(t, `^[a-z][a-zA-Z0-9]*$`, op.OperationID, "%s: operationId", route)
		require.NotContains(t, operationIDs, op.OperationID, "%s: operationId also %s's", route, operationIDs[op.OperationID])
		operationIDs[op.OperationID] = route
		require.Contains(t, op.Responses, "400", "%s: every route refuses a path or query PostgreSQL cannot store", route)
		if strings.Contains(path, "{") {
			require.Contains(t, op.Responses, "404", route)
		}
		declared := map[string]bool{}
		for _, p := range op.Parameters {
			name := p.Name
			if p.Ref != "" {
				param, ok := whole["components"].(map[string]any)["parameters"].(map[string]any)[strings.TrimPrefix(p.Ref, "#/components/parameters/")].(map[string]any)
				require.True(t, ok, "%s: parameter %s is in components.parameters", route, p.Ref)
				name, _ = param["name"].(string)
			}
			declared[name] = true
		}
		for _, m := range regexp.MustCompile(`\{([^}]+)\}`).FindAllStringSubmatch(path, -1) {
			require.True(t, declared[m[1]], "%s: path parameter %s is not declared", route, m[1])
		}
		if !strings.HasPrefix(path, "/v1/") {
			require.NotNil(t, op.Security, "%s: public routes say so (security: [])", route)
			require.Empty(t, op.Security, route)
			continue
		}
		require.NotEmpty(t, op.Roles, "%s: x-roles", route)
		for _, code := range []string{"401", "403", "429", "500", "503"} {
			require.Contains(t, op.Responses, code, route)
		}
		if method == http.MethodPost {
			require.True(t, declared["Idempotency-Key"], "%s: Idempotency-Key", route)
			for _, code := range []string{"400", "409", "413", "422"} {
				require.Contains(t, op.Responses, code, route)
			}
		}
		if !registered[route] {
			continue
		}
		// The documented roles are the enforced ones.
		concrete := regexp.MustCompile(`\{[^}]+\}`).ReplaceAllString(path, "doc_check")
		for role, token := range tokens {
			key := ""
			if method == http.MethodPost {
				key = fmt.Sprintf("openapi-%s-%s", role, path)
			}
			rec := b.do(t, method, concrete, token, key, "")
			if slices.Contains(op.Roles, role) {
				require.NotContains(t, []int{401, 403}, rec.Code, "%s as %s: %s", route, role, rec.Body.String())
			} else {
				require.Equal(t, http.StatusForbidden, rec.Code, "%s as %s", route, role)
			}
		}
	}
}

// schemaChecker validates JSON values against the document's schemas, as
// far as the document uses JSON Schema: $ref, allOf, oneOf, type (with
// null), required, properties, items and enum.
type schemaChecker struct {
	t     *testing.T
	whole map[string]any
}

func (sc schemaChecker) resolve(s map[string]any) map[string]any {
	for {
		ref, ok := s["$ref"].(string)
		if !ok {
			return s
		}
		var cur any = sc.whole
		for _, part := range strings.Split(strings.TrimPrefix(ref, "#/"), "/") {
			cur = cur.(map[string]any)[part]
		}
		s = cur.(map[string]any)
	}
}

func jsonType(v any) string {
	switch v := v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case string:
		return "string"
	case float64:
		if v == float64(int64(v)) {
			return "integer"
		}
		return "number"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return "unknown"
}

func (sc schemaChecker) check(where string, schema map[string]any, v any) {
	sc.t.Helper()
	schema = sc.resolve(schema)
	if all, ok := schema["allOf"].([]any); ok {
		for _, s := range all {
			sc.check(where, s.(map[string]any), v)
		}
	}
	if one, ok := schema["oneOf"].([]any); ok {
		matched := 0
		for _, s := range one {
			sub := schemaChecker{t: &testing.T{}, whole: sc.whole}
			if sub.matches(s.(map[string]any), v) {
				matched++
			}
		}
		require.Equal(sc.t, 1, matched, "%s: %v matches one of oneOf", where, v)
	}
	if typ, ok := schema["type"]; ok {
		var allowed []string
		switch typ := typ.(type) {
		case string:
			allowed = []string{typ}
		case []any:
			for _, x := range typ {
				allowed = append(allowed, x.(string))
			}
		}
		got := jsonType(v)
		if got == "integer" && slices.Contains(allowed, "number") {
			got = "number"
		}
		require.Contains(sc.t, allowed, got, "%s: type of %v", where, v)
	}
	if enum, ok := schema["enum"].([]any); ok {
		require.Contains(sc.t, enum, v, "%s: enum", where)
	}
	obj, isObj := v.(map[string]any)
	if isObj {
		for _, r := range asStrings(schema["required"]) {
			require.Contains(sc.t, obj, r, "%s: required property", where)
		}
		if props, ok := schema["properties"].(map[string]any); ok {
			for name, ps := range props {
				if pv, ok := obj[name]; ok {
					sc.check(where+"."+name, ps.(map[string]any), pv)
				}
			}
		}
	}
	if arr, ok := v.([]any); ok {
		if items, ok := schema["items"].(map[string]any); ok {
			for i, x := range arr {
				sc.check(fmt.Sprintf("%s[%d]", where, i), items, x)
			}
		}
	}
}

func (sc schemaChecker) matches(schema map[string]any, v any) (ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	schema = sc.resolve(schema)
	if typ, has := schema["type"].(string); has && typ != jsonType(v) {
		return false
	}
	if enum, has := schema["enum"].([]any); has && !slices.Contains(enum, v) {
		return false
	}
	return true
}

func asStrings(v any) []string {
	var out []string
	if xs, ok := v.([]any); ok {
		for _, x := range xs {
			out = append(out, x.(string))
		}
	}
	return out
}

// TestOpsAnswersMatchTheDocument: what the ops routes really answer fits the
// schemas the document gives them, so the document cannot drift from the
// code unnoticed.
func TestOpsAnswersMatchTheDocument(t *testing.T) {
	t.Parallel()
	b := wiredEcho(t)
	var whole map[string]any
	require.NoError(t, json.Unmarshal(api.OpenAPI, &whole))
	sc := schemaChecker{t: t, whole: whole}
	b.seed(t, "evt_doc1", seedOpts{lastError: "boom"})
	b.seed(t, "evt_doc2", seedOpts{lastError: "boom"})
	b.failJobs(t, "evt_doc1", "first", "second")
	b.namePayment(t, "pi_doc", "evt_doc2", "evt_doc2", "evt_doc2")
	b.seedRun(t, "2025-03-14", 1)
	_, err := b.pool.Exec(context.Background(), `UPDATE payments SET reference = 'ord_doc', customer = 'cus_doc',
		metadata = '{"order_id":"ord_doc"}' WHERE id = 'pi_doc'`)
	require.NoError(t, err)
	_, err = b.pool.Exec(context.Background(), `INSERT INTO double_charges (reference, state, detected_at)
		VALUES ('ord_doc', 'open', now())`)
	require.NoError(t, err)

	for _, c := range []struct {
		method, docPath, path, key, body string
		status                           int
	}{
		{http.MethodGet, "/v1/ops/poison", "/v1/ops/poison", "", "", 200},
		{http.MethodGet, "/v1/events", "/v1/events?limit=1", "", "", 200},
		{http.MethodGet, "/v1/events", "/v1/events?status=lost", "", "", 400},
		{http.MethodGet, "/v1/payments", "/v1/payments", "", "", 200},
		{http.MethodGet, "/v1/payments", "/v1/payments?currency=US", "", "", 400},
		{http.MethodGet, "/v1/reconciliation/runs", "/v1/reconciliation/runs", "", "", 200},
		{http.MethodGet, "/v1/events/{provider}/{event_id}", "/v1/events/stripe/evt_doc1", "", "", 200},
		{http.MethodGet, "/v1/ops/stats", "/v1/ops/stats", "", "", 200},
		{http.MethodPost, "/v1/ops/replay", "/v1/ops/replay", "doc-dry", `{"status":"poison","dry_run":true}`, 200},
		{http.MethodPost, "/v1/ops/events/{provider}/{event_id}/replay", "/v1/ops/events/stripe/evt_doc1/replay", "doc-r", `{"reason":"r"}`, 202},
		{http.MethodPost, "/v1/ops/events/{provider}/{event_id}/discard", "/v1/ops/events/stripe/evt_doc1/discard", "doc-d", `{"reason":"r"}`, 200},
		{http.MethodPost, "/v1/ops/replay", "/v1/ops/replay", "doc-bulk", `{"status":"poison"}`, 202},
		{http.MethodGet, "/v1/ops/audit", "/v1/ops/audit", "", "", 200},
		{http.MethodPost, "/v1/ops/events/{provider}/{event_id}/discard", "/v1/ops/events/stripe/evt_doc1/discard", "", "", 400},
		{http.MethodPost, "/v1/ops/events/{provider}/{event_id}/discard", "/v1/ops/events/stripe/evt_none/discard", "doc-404", `{"reason":"r"}`, 404},
		{http.MethodGet, "/v1/ops/poison", "/v1/ops/poison", "", "", 401},
		{http.MethodGet, "/v1/payments", "/v1/payments?reference=ord_doc&status=succeeded", "", "", 200},
		{http.MethodGet, "/v1/payments", "/v1/payments?customer=cus_doc&currency=usd", "", "", 200},
		{http.MethodGet, "/v1/payments", "/v1/payments?q=pi_doc", "", "", 200},
		{http.MethodGet, "/v1/payments/{payment_id}", "/v1/payments/pi_doc", "", "", 200},
		{http.MethodGet, "/v1/ops/double-charges", "/v1/ops/double-charges?state=open", "", "", 200},
		{http.MethodGet, "/v1/ops/double-charges", "/v1/ops/double-charges?state=gone", "", "", 400},
		{http.MethodPost, "/v1/ops/double-charges/{reference}/dismiss", "/v1/ops/double-charges/ord_doc/dismiss", "doc-dc0", `{}`, 400},
		{http.MethodPost, "/v1/ops/double-charges/{reference}/dismiss", "/v1/ops/double-charges/ord_doc/dismiss", "doc-dc", `{"note":"n"}`, 200},
		{http.MethodPost, "/v1/ops/double-charges/{reference}/dismiss", "/v1/ops/double-charges/ord_doc/dismiss", "doc-dc2", `{"note":"n"}`, 409},
		{http.MethodPost, "/v1/ops/double-charges/{reference}/dismiss", "/v1/ops/double-charges/ord_none/dismiss", "doc-dc3", `{"note":"n"}`, 404},
	} {
		token := opsTok
		if c.status == 401 {
			token = ""
		}
		rec := b.do(t, c.method, c.path, token, c.key, c.body)
		where := fmt.Sprintf("%s %s → %d", c.method, c.path, c.status)
		require.Equal(t, c.status, rec.Code, "%s: %s", where, rec.Body.String())
		op := whole["paths"].(map[string]any)[c.docPath].(map[string]any)[strings.ToLower(c.method)].(map[string]any)
		resp, ok := op["responses"].(map[string]any)[fmt.Sprint(c.status)].(map[string]any)
		require.True(t, ok, "%s: status documented", where)
		resp = sc.resolve(resp)
		content := resp["content"].(map[string]any)
		ct := strings.Split(rec.Header().Get(echo.HeaderContentType), ";")[0]
		media, ok := content[ct].(map[string]any)
		require.True(t, ok, "%s: content type %s documented", where, ct)
		var v any
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &v))
		sc.check(where, media["schema"].(map[string]any), v)
	}
}

func adyenReceiver(t *testing.T) provider.Receiver {
	t.Helper()
	r, err := adyen.NewReceiver(adyen.Config{HMACKeys: [][]byte{[]byte("openapi-test-key")}})
	require.NoError(t, err)
	return r
}
