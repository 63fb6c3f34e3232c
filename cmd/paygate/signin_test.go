package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestLoadSignin(t *testing.T) {
	t.Parallel()
	env := func(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }
	provider := map[string]string{
		"PAYGATE_OIDC_ISSUER": "https://id.example.com/realms/acme", "PAYGATE_OIDC_CLIENT_ID": "paygate",
		"PAYGATE_OIDC_CLIENT_SECRET": "s3cret", "PAYGATE_PUBLIC_URL": "https://paygate.example.com/",
	}
	with := func(extra map[string]string) map[string]string {
		out := map[string]string{}
		for k, v := range provider {
			out[k] = v
		}
		for k, v := range extra {
			out[k] = v
		}
		return out
	}

	s, err := loadSignin(env(nil))
	require.NoError(t, err, "make run: no provider, tokens on")
	require.False(t, s.oidc())
	require.False(t, s.NoTokens)
	require.Equal(t, 12*time.Hour, s.SessionMaxAge)

	s, err = loadSignin(env(with(map[string]string{"PAYGATE_CONSOLE_TOKENS": "false", "PAYGATE_SESSION_MAX_AGE": "8h",
		"PAYGATE_OIDC_SCOPES": "email profile groups", "PAYGATE_OIDC_ROLES_CLAIM": "realm_access.roles"})))
	require.NoError(t, err)
	require.True(t, s.oidc())
	require.True(t, s.NoTokens)
	require.Equal(t, "https://paygate.example.com", s.PublicURL)
	require.Equal(t, 8*time.Hour, s.SessionMaxAge)
	require.Equal(t, []string{"email", "profile", "groups"}, s.Scopes)
	require.Equal(t, "realm_access.roles", s.RolesClaim)
	ops, finance := s.Roles.Of([]string{"paygate-finance"})
	require.True(t, finance && !ops, "the default mapping")

	for name, kv := range map[string]map[string]string{
		"an issuer without its client":    {"PAYGATE_OIDC_ISSUER": "https://id.example.com", "PAYGATE_PUBLIC_URL": "https://p.example.com"},
		"a provider without a public URL": with(map[string]string{"PAYGATE_PUBLIC_URL": ""}),
		"a public URL with a path":        with(map[string]string{"PAYGATE_PUBLIC_URL": "https://example.com/paygate"}),
		"a relative public URL":           with(map[string]string{"PAYGATE_PUBLIC_URL": "paygate.example.com"}),
		"an issuer that is no URL":        with(map[string]string{"PAYGATE_OIDC_ISSUER": "id.example.com"}),
		"tokens off without a provider":   {"PAYGATE_CONSOLE_TOKENS": "false"},
		"tokens neither true nor false":   with(map[string]string{"PAYGATE_CONSOLE_TOKENS": "no"}),
		"a role that is not one":          with(map[string]string{"PAYGATE_OIDC_ROLES": "admin=paygate-admins"}),
		"a session age too short":         {"PAYGATE_SESSION_MAX_AGE": "10s"},
		"a session age that is no time":   {"PAYGATE_SESSION_MAX_AGE": "12"},
	} {
		_, err := loadSignin(env(kv))
		require.Error(t, err, name)
		require.NotContains(t, err.Error(), "s3cret", name)
	}
}
