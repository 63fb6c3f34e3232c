package stripeschema_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/internal/stripeschema"
)

// testSpec is a miniature of Stripe's spec, with each construct the real
// one uses: expandable fields (anyOf id-or-object), nullable references,
// metadata maps, enums, integer and number fields, formats.
const testSpec = `{
  "openapi": "3.0.0",
  "info": {"version": "2099-01-01"},
  "components": {"schemas": {
    "charge": {
      "type": "object",
      "required": ["id", "object", "amount", "currency", "status", "metadata"],
      "properties": {
        "id": {"type": "string", "maxLength": 12},
        "object": {"type": "string", "enum": ["charge"]},
        "amount": {"type": "integer"},
        "currency": {"type": "string", "format": "currency"},
        "status": {"type": "string", "enum": ["failed", "pending", "succeeded"]},
        "metadata": {"type": "object", "additionalProperties": {"type": "string", "maxLength": 5}},
        "description": {"type": "string", "nullable": true, "maxLength": 20},
        "exchange_rate": {"type": "number", "nullable": true},
        "outcome": {"anyOf": [{"$ref": "#/components/schemas/outcome"}], "nullable": true},
        "billing": {"$ref": "#/components/schemas/outcome"},
        "balance_transaction": {"anyOf": [{"type": "string", "maxLength": 8}, {"$ref": "#/components/schemas/balance_transaction"}], "nullable": true},
        "payment_method_types": {"type": "array", "items": {"type": "string", "maxLength": 4}},
        "refunds": {
          "type": "object", "nullable": true, "title": "RefundList",
          "required": ["object", "data", "has_more", "url"],
          "properties": {
            "object": {"type": "string", "enum": ["list"]},
            "data": {"type": "array", "items": {"$ref": "#/components/schemas/refund"}},
            "has_more": {"type": "boolean"},
            "url": {"type": "string", "pattern": "^/v1/charges/"}
          }
        },
        "source": {"oneOf": [{"type": "string"}, {"$ref": "#/components/schemas/refund"}]},
        "rate": {"type": "string", "format": "decimal"},
        "extra": {"type": "object"}
      }
    },
    "outcome": {"type": "object", "required": ["type"], "properties": {"type": {"type": "string"}}},
    "refund": {"type": "object", "required": ["id"], "properties": {"id": {"type": "string"}, "amount": {"type": "integer"}}},
    "balance_transaction": {
      "type": "object", "required": ["id", "object"],
      "properties": {"id": {"type": "string"}, "object": {"type": "string", "enum": ["balance_transaction"]}}
    },
    "ambiguous": {"oneOf": [{"type": "string"}, {"type": "string", "maxLength": 3}]},
    "dangling": {"type": "object", "properties": {"x": {"$ref": "#/components/schemas/nope"}}}
  }},
  "paths": {
    "/v1/charges": {"get": {"responses": {
      "200": {"content": {"application/json": {"schema": {
        "type": "object", "required": ["object", "data"],
        "properties": {
          "object": {"type": "string", "enum": ["list"]},
          "data": {"type": "array", "items": {"$ref": "#/components/schemas/charge"}}
        }
      }}}}
    }}}
  }
}`

func loadTestSpec(t *testing.T) *stripeschema.Spec {
	t.Helper()
	spec, err := stripeschema.Read(strings.NewReader(testSpec))
	require.NoError(t, err)
	return spec
}

// validCharge is a charge that fits; each case below breaks one thing.
const validCharge = `{
  "id": "ch_1", "object": "charge", "amount": 1000, "currency": "usd",
  "status": "succeeded", "metadata": {"k": "v"}, "description": null,
  "exchange_rate": 1.085, "outcome": {"type": "authorized"},
  "billing": {"type": "x"},
  "balance_transaction": "txn_1", "payment_method_types": ["card"],
  "refunds": {"object": "list", "data": [{"id": "re_1", "amount": 5}], "has_more": false, "url": "/v1/charges/ch_1/refunds"},
  "source": "src_1", "rate": "1.25", "extra": {"anything": [1, "goes"]}
}`

func decode(t *testing.T, s string) any {
	t.Helper()
	v, err := stripeschema.Decode([]byte(s))
	require.NoError(t, err)
	return v
}

// with returns validCharge with field set to the JSON value raw, or removed
// when raw is empty.
func with(t *testing.T, field, raw string) any {
	t.Helper()
	obj := decode(t, validCharge).(map[string]any)
	if raw == "" {
		delete(obj, field)
	} else {
		obj[field] = decode(t, raw)
	}
	return obj
}

func TestValidCharge(t *testing.T) {
	t.Parallel()
	spec := loadTestSpec(t)
	require.Equal(t, "2099-01-01", spec.Version)
	require.Empty(t, spec.Validate("charge", decode(t, validCharge), nil))
	// Every alternative of an expandable field: the id, the object, null.
	for _, bt := range []string{`"txn_1"`, `{"id": "txn_1", "object": "balance_transaction"}`, `null`} {
		require.Empty(t, spec.Validate("charge", with(t, "balance_transaction", bt), nil), bt)
	}
	// Optional fields may be absent; number takes integers too.
	require.Empty(t, spec.Validate("charge", with(t, "refunds", ""), nil))
	require.Empty(t, spec.Validate("charge", with(t, "exchange_rate", "2"), nil))
	require.Empty(t, spec.Validate("charge", with(t, "source", `{"id": "re_1"}`), nil))
}

func TestViolations(t *testing.T) {
	t.Parallel()
	spec := loadTestSpec(t)
	tests := []struct {
		name   string
		field  string
		raw    string // "" removes the field
		want   stripeschema.Violation
		detail string // a part of the violation's detail
	}{
		{
			name: "missing required", field: "amount", raw: "",
			want: stripeschema.Violation{Path: "$.amount", Schema: "charge", Field: "amount", Kind: stripeschema.KindRequired},
		},
		{
			name: "string for integer", field: "amount", raw: `"1000"`,
			want: stripeschema.Violation{Path: "$.amount", Schema: "charge", Field: "amount", Kind: stripeschema.KindType},
		},
		{
			name: "fraction for integer", field: "amount", raw: `10.5`,
			want:   stripeschema.Violation{Path: "$.amount", Schema: "charge", Field: "amount", Kind: stripeschema.KindType},
			detail: "not an integer",
		},
		{
			name: "exponent for integer", field: "amount", raw: `1e3`,
			want: stripeschema.Violation{Path: "$.amount", Schema: "charge", Field: "amount", Kind: stripeschema.KindType},
		},
		{
			name: "string for number", field: "exchange_rate", raw: `"1.085"`,
			want: stripeschema.Violation{Path: "$.exchange_rate", Schema: "charge", Field: "exchange_rate", Kind: stripeschema.KindType},
		},
		{
			name: "null where not nullable", field: "amount", raw: `null`,
			want: stripeschema.Violation{Path: "$.amount", Schema: "charge", Field: "amount", Kind: stripeschema.KindNull},
		},
		{
			name: "null for a non-nullable reference", field: "billing", raw: `null`,
			want: stripeschema.Violation{Path: "$.billing", Schema: "charge", Field: "billing", Kind: stripeschema.KindNull},
		},
		{
			name: "unknown property", field: "refunded_total", raw: `5`,
			want: stripeschema.Violation{Path: "$.refunded_total", Schema: "charge", Field: "refunded_total", Kind: stripeschema.KindUnknown},
		},
		{
			name: "unknown property in an inline object", field: "refunds",
			raw:  `{"object": "list", "data": [], "has_more": false, "url": "/v1/charges/ch_1/refunds", "total_count": 0}`,
			want: stripeschema.Violation{Path: "$.refunds.total_count", Schema: "charge.refunds", Field: "total_count", Kind: stripeschema.KindUnknown},
		},
		{
			name: "list where an object is", field: "refunds", raw: `[]`,
			want: stripeschema.Violation{Path: "$.refunds", Schema: "charge", Field: "refunds", Kind: stripeschema.KindType},
		},
		{
			name: "value outside the enum", field: "status", raw: `"paid"`,
			want:   stripeschema.Violation{Path: "$.status", Schema: "charge", Field: "status", Kind: stripeschema.KindEnum},
			detail: `"paid" is not one of ["failed" "pending" "succeeded"]`,
		},
		{
			name: "expandable given neither id nor object", field: "balance_transaction", raw: `42`,
			want:   stripeschema.Violation{Path: "$.balance_transaction", Schema: "charge", Field: "balance_transaction", Kind: stripeschema.KindNoMatch},
			detail: "string, balance_transaction",
		},
		{
			name: "expanded object with a field missing", field: "balance_transaction", raw: `{"id": "txn_1"}`,
			want: stripeschema.Violation{Path: "$.balance_transaction.object", Schema: "balance_transaction", Field: "object", Kind: stripeschema.KindRequired},
		},
		{
			name: "expandable id too long", field: "balance_transaction", raw: `"txn_123456789"`,
			want: stripeschema.Violation{Path: "$.balance_transaction", Schema: "charge", Field: "balance_transaction", Kind: stripeschema.KindMaxLength},
		},
		{
			name: "oneOf given neither", field: "source", raw: `true`,
			want:   stripeschema.Violation{Path: "$.source", Schema: "charge", Field: "source", Kind: stripeschema.KindNoMatch},
			detail: "oneOf",
		},
		{
			name: "oneOf object that does not fit", field: "source", raw: `{"id": "re_1", "amount": "5"}`,
			want: stripeschema.Violation{Path: "$.source.amount", Schema: "refund", Field: "amount", Kind: stripeschema.KindType},
		},
		{
			name: "array item of the wrong type", field: "payment_method_types", raw: `["card", 7]`,
			want: stripeschema.Violation{Path: "$.payment_method_types[1]", Schema: "charge", Field: "payment_method_types", Kind: stripeschema.KindType},
		},
		{
			name: "array item too long", field: "payment_method_types", raw: `["sepa_debit"]`,
			want: stripeschema.Violation{Path: "$.payment_method_types[0]", Schema: "charge", Field: "payment_method_types", Kind: stripeschema.KindMaxLength},
		},
		{
			name: "object where an array is", field: "payment_method_types", raw: `{"0": "card"}`,
			want: stripeschema.Violation{Path: "$.payment_method_types", Schema: "charge", Field: "payment_method_types", Kind: stripeschema.KindType},
		},
		{
			name: "item of a referenced schema", field: "refunds",
			raw:  `{"object": "list", "data": [{"id": "re_1"}, {"amount": 5}], "has_more": false, "url": "/v1/charges/ch_1/refunds"}`,
			want: stripeschema.Violation{Path: "$.refunds.data[1].id", Schema: "refund", Field: "id", Kind: stripeschema.KindRequired},
		},
		{
			name: "nullable reference resolved and checked", field: "outcome", raw: `{}`,
			want: stripeschema.Violation{Path: "$.outcome.type", Schema: "outcome", Field: "type", Kind: stripeschema.KindRequired},
		},
		{
			name: "maxLength counts characters", field: "description", raw: `"ééééééééééééééééééééé"`,
			want:   stripeschema.Violation{Path: "$.description", Schema: "charge", Field: "description", Kind: stripeschema.KindMaxLength},
			detail: "21 characters, at most 20",
		},
		{
			name: "additionalProperties schema", field: "metadata", raw: `{"k": "too long"}`,
			want: stripeschema.Violation{Path: "$.metadata.k", Schema: "charge.metadata", Field: "k", Kind: stripeschema.KindMaxLength},
		},
		{
			name: "additionalProperties type", field: "metadata", raw: `{"k": 1}`,
			want: stripeschema.Violation{Path: "$.metadata.k", Schema: "charge.metadata", Field: "k", Kind: stripeschema.KindType},
		},
		{
			name: "pattern", field: "refunds",
			raw:  `{"object": "list", "data": [], "has_more": false, "url": "/v1/refunds"}`,
			want: stripeschema.Violation{Path: "$.refunds.url", Schema: "charge.refunds", Field: "url", Kind: stripeschema.KindPattern},
		},
		{
			name: "upper-case currency", field: "currency", raw: `"USD"`,
			want: stripeschema.Violation{Path: "$.currency", Schema: "charge", Field: "currency", Kind: stripeschema.KindFormat},
		},
		{
			name: "decimal format", field: "rate", raw: `"1,25"`,
			want: stripeschema.Violation{Path: "$.rate", Schema: "charge", Field: "rate", Kind: stripeschema.KindFormat},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := spec.Validate("charge", with(t, tt.field, tt.raw), nil)
			require.Len(t, got, 1, "violations: %v", got)
			if tt.detail != "" {
				require.Contains(t, got[0].Detail, tt.detail)
			}
			got[0].Detail = ""
			require.Equal(t, tt.want, got[0])
		})
	}
}

func TestFloatsAreRefused(t *testing.T) {
	t.Parallel()
	spec := loadTestSpec(t)
	// json.Unmarshal into any makes float64s, which cannot tell 1000 from
	// 1000.0: the validator insists on json.Number.
	var v any
	require.NoError(t, json.Unmarshal([]byte(validCharge), &v))
	got := spec.Validate("charge", v, nil)
	require.NotEmpty(t, got)
	require.Equal(t, stripeschema.KindType, got[0].Kind)
	require.Contains(t, got[0].Detail, "UseNumber")
}

func TestSeveralViolationsInStableOrder(t *testing.T) {
	t.Parallel()
	spec := loadTestSpec(t)
	got := spec.Validate("charge", decode(t, `{"id": "ch_1", "object": "card", "zeta": 1, "alpha": 2}`), nil)
	var paths []string
	for _, v := range got {
		paths = append(paths, v.Path+" "+string(v.Kind))
	}
	// Missing fields in the order the schema requires them, then the
	// present ones by name.
	require.Equal(t, []string{
		"$.amount missing_required", "$.currency missing_required", "$.status missing_required", "$.metadata missing_required",
		"$.alpha unknown_property", "$.object enum", "$.zeta unknown_property",
	}, paths)
	require.Equal(t, got, spec.Validate("charge", decode(t, `{"id": "ch_1", "object": "card", "zeta": 1, "alpha": 2}`), nil))
}

func TestAllow(t *testing.T) {
	t.Parallel()
	spec := loadTestSpec(t)
	allowObject := &stripeschema.ValidateOpts{Allow: func(v stripeschema.Violation) bool {
		return v.Schema == "balance_transaction" && v.Field == "object" && v.Kind == stripeschema.KindRequired
	}}
	// The allowed violation is reported as allowed, and the expanded object
	// still counts as fitting its alternative of anyOf.
	got := spec.Validate("charge", with(t, "balance_transaction", `{"id": "txn_1"}`), allowObject)
	require.Len(t, got, 1)
	require.True(t, got[0].Allowed)
	require.Equal(t, "$.balance_transaction.object", got[0].Path)
	// Anything else is still a violation.
	got = spec.Validate("charge", with(t, "balance_transaction", `{"object": "balance_transaction"}`), allowObject)
	require.Len(t, got, 1)
	require.False(t, got[0].Allowed)
	require.Equal(t, "$.balance_transaction.id", got[0].Path)
}

func TestOneOfAmbiguous(t *testing.T) {
	t.Parallel()
	spec := loadTestSpec(t)
	require.Empty(t, spec.Validate("ambiguous", decode(t, `"long string"`), nil))
	got := spec.Validate("ambiguous", decode(t, `"ab"`), nil)
	require.Len(t, got, 1)
	require.Equal(t, stripeschema.KindAmbiguous, got[0].Kind)
}

func TestSpecProblems(t *testing.T) {
	t.Parallel()
	spec := loadTestSpec(t)
	got := spec.Validate("no_such_schema", map[string]any{}, nil)
	require.Len(t, got, 1)
	require.Equal(t, stripeschema.KindSpec, got[0].Kind)
	got = spec.Validate("dangling", decode(t, `{"x": {}}`), nil)
	require.Len(t, got, 1)
	require.Equal(t, stripeschema.KindSpec, got[0].Kind)
	require.Contains(t, got[0].Detail, `unknown schema "nope"`)

	_, err := stripeschema.Read(strings.NewReader(`{"swagger": "2.0"}`))
	require.ErrorContains(t, err, "want 3.0")
}

func TestValidateField(t *testing.T) {
	t.Parallel()
	spec := loadTestSpec(t)
	require.True(t, spec.HasProperty("charge", "amount"))
	require.False(t, spec.HasProperty("charge", "amount_due"))
	require.Empty(t, spec.ValidateField("charge", "amount", decode(t, "5"), false, nil))
	require.Empty(t, spec.ValidateField("charge", "amount", nil, true, nil))
	got := spec.ValidateField("charge", "amount", nil, false, nil)
	require.Len(t, got, 1)
	require.Equal(t, stripeschema.KindNull, got[0].Kind)
	got = spec.ValidateField("charge", "amount_due", decode(t, "5"), true, nil)
	require.Len(t, got, 1)
	require.Equal(t, stripeschema.Violation{Path: "$.amount_due", Schema: "charge", Field: "amount_due", Kind: stripeschema.KindUnknown, Detail: "not a property of charge"}, got[0])
}

func TestValidateResponse(t *testing.T) {
	t.Parallel()
	spec := loadTestSpec(t)
	list := `{"object": "list", "data": [` + validCharge + `]}`
	require.Empty(t, spec.ValidateResponse("GET", "/v1/charges", "200", decode(t, list), nil))
	got := spec.ValidateResponse("GET", "/v1/charges", "200", decode(t, `{"object": "list", "data": [{"id": "ch_1"}], "url": "/v1/charges"}`), nil)
	require.NotEmpty(t, got)
	require.Equal(t, "$.data[0].object", got[0].Path)
	require.Equal(t, "charge", got[0].Schema)
	require.Equal(t, "$.url", got[len(got)-1].Path)
	require.Equal(t, "GET /v1/charges 200", got[len(got)-1].Schema)
	require.Equal(t, stripeschema.KindUnknown, got[len(got)-1].Kind)

	got = spec.ValidateResponse("GET", "/v1/refunds", "200", decode(t, list), nil)
	require.Len(t, got, 1)
	require.Equal(t, stripeschema.KindSpec, got[0].Kind)
}

func TestDecode(t *testing.T) {
	t.Parallel()
	v, err := stripeschema.Decode([]byte(`{"amount": 1000}`))
	require.NoError(t, err)
	require.Equal(t, json.Number("1000"), v.(map[string]any)["amount"])
	_, err = stripeschema.Decode([]byte(`{} {}`))
	require.ErrorContains(t, err, "trailing")
	_, err = stripeschema.Decode([]byte(`{`))
	require.Error(t, err)
}

func TestStripeMockSpecNamesTheScript(t *testing.T) {
	// Not parallel: it points the go command at an empty module cache.
	t.Setenv("GOMODCACHE", t.TempDir())
	_, err := stripeschema.StripeMockSpec("v0.162.0")
	require.ErrorContains(t, err, "scripts/tools.sh")
	require.ErrorContains(t, err, "go mod download github.com/stripe/stripe-mock@v0.162.0")
}

func TestStripeMockSpecFindsTheFile(t *testing.T) {
	cache := t.TempDir()
	t.Setenv("GOMODCACHE", cache)
	dir := filepath.Join(cache, "github.com", "stripe", "stripe-mock@v9.9.9", "embedded", "openapi")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "spec3.json"), []byte(testSpec), 0o644))
	p, err := stripeschema.StripeMockSpec("v9.9.9")
	require.NoError(t, err)
	spec, err := stripeschema.Load(p)
	require.NoError(t, err)
	require.Equal(t, "2099-01-01", spec.Version)
}

func TestModCachePathEscapesCapitals(t *testing.T) {
	cache := t.TempDir()
	t.Setenv("GOMODCACHE", cache)
	p, err := stripeschema.ModCachePath("github.com/BurntSushi/toml", "v1.0.0")
	require.NoError(t, err)
	require.Equal(t, filepath.Join(cache, "github.com/!burnt!sushi/toml@v1.0.0"), p)
}
