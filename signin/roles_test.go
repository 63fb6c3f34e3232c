package signin

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseRoles(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]map[Role][]string{
		"": {RoleOps: {"paygate-ops"}, RoleFinance: {"paygate-finance"}},
		"ops=paygate-ops,finance=paygate-finance":  {RoleOps: {"paygate-ops"}, RoleFinance: {"paygate-finance"}},
		" ops = sre , ops=oncall,finance=accounts": {RoleOps: {"sre", "oncall"}, RoleFinance: {"accounts"}},
		"ops=ann@example.com,ops=ann@example.com":  {RoleOps: {"ann@example.com"}},
		"finance=/paygate/finance":                 {RoleFinance: {"/paygate/finance"}},
	} {
		r, err := ParseRoles(in)
		require.NoError(t, err, in)
		require.Equal(t, want, r.byRole, in)
	}
	for _, in := range []string{"ops", "admin=paygate-admins", "consumer=feeds", "ops=", "=paygate-ops", ",", "ops=a,finance"} {
		_, err := ParseRoles(in)
		require.ErrorIs(t, err, ErrRolesConfig, in)
	}
}

func TestClaimValues(t *testing.T) {
	t.Parallel()
	var claims map[string]any
	require.NoError(t, json.Unmarshal([]byte(`{
		"groups": ["paygate-ops", 7, "engineering"],
		"role": "paygate-finance",
		"realm_access": {"roles": ["paygate-ops"]},
		"https://example.com/groups": ["paygate-finance"],
		"nested": {"deeper": {"list": ["a"]}},
		"count": 3
	}`), &claims))
	for path, want := range map[string][]string{
		"groups":                     {"paygate-ops", "engineering"},
		"role":                       {"paygate-finance"},
		"realm_access.roles":         {"paygate-ops"},
		"https://example.com/groups": {"paygate-finance"},
		"nested.deeper.list":         {"a"},
		"count":                      nil,
		"missing":                    nil,
		"realm_access.missing":       nil,
		"groups.deeper":              nil,
	} {
		require.Equal(t, want, claimValues(claims, path), path)
	}
}
