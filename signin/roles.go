package signin

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Role is a console role a person may be given: ops or finance. (The
// consumer role is for machines and is never a person's.)
type Role string

const (
	RoleOps     Role = "ops"
	RoleFinance Role = "finance"
)

// DefaultRoles is PAYGATE_OIDC_ROLES's default: the groups named in the
// contract's example.
const DefaultRoles = "ops=paygate-ops,finance=paygate-finance"

// DefaultRolesClaim is PAYGATE_OIDC_ROLES_CLAIM's default.
const DefaultRolesClaim = "groups"

// ErrRolesConfig is ParseRoles' answer to a mapping it cannot read.
var ErrRolesConfig = errors.New("invalid role mapping")

// Roles maps the values of a person's roles claim (their groups) to
// console roles.
type Roles struct {
	byRole map[Role][]string
}

// ParseRoles reads a mapping such as "ops=paygate-ops,finance=paygate-finance"
// (PAYGATE_OIDC_ROLES): comma-separated role=value entries, a role given
// again for another value that grants it. "" is DefaultRoles. It fails with
// ErrRolesConfig for an entry that is not role=value, a role other than ops
// or finance, or an empty value.
func ParseRoles(s string) (Roles, error) {
	if strings.TrimSpace(s) == "" {
		s = DefaultRoles
	}
	r := Roles{byRole: map[Role][]string{}}
	var errs []error
	for i, entry := range strings.Split(s, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		role, value, ok := strings.Cut(entry, "=")
		role, value = strings.TrimSpace(role), strings.TrimSpace(value)
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("%w: entry %d is not role=value", ErrRolesConfig, i+1))
		case Role(role) != RoleOps && Role(role) != RoleFinance:
			errs = append(errs, fmt.Errorf("%w: entry %d: the role is ops or finance, not %q", ErrRolesConfig, i+1, role))
		case value == "":
			errs = append(errs, fmt.Errorf("%w: entry %d: no value after %s=", ErrRolesConfig, i+1, role))
		default:
			if !slices.Contains(r.byRole[Role(role)], value) {
				r.byRole[Role(role)] = append(r.byRole[Role(role)], value)
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return Roles{}, err
	}
	if len(r.byRole) == 0 {
		return Roles{}, fmt.Errorf("%w: no entry", ErrRolesConfig)
	}
	return r, nil
}

// Of answers the roles that values (a person's groups) grant.
func (r Roles) Of(values []string) (ops, finance bool) {
	for _, v := range values {
		ops = ops || slices.Contains(r.byRole[RoleOps], v)
		finance = finance || slices.Contains(r.byRole[RoleFinance], v)
	}
	return ops, finance
}

// Values lists the values that grant role, as configured.
func (r Roles) Values(role Role) []string { return slices.Clone(r.byRole[role]) }

// claimValues reads the claim named path from claims: a claim of that
// exact name (Auth0's are URLs, dots and all), else the one its dots step
// to through objects (Keycloak's realm_access.roles). A string is one
// value, an array its strings; anything else, or nothing there, none.
func claimValues(claims map[string]any, path string) []string {
	v, ok := claims[path]
	if !ok {
		v = any(claims)
		for _, step := range strings.Split(path, ".") {
			obj, isObj := v.(map[string]any)
			if !isObj {
				return nil
			}
			if v, ok = obj[step]; !ok {
				return nil
			}
		}
	}
	switch v := v.(type) {
	case string:
		return []string{v}
	case []any:
		out := make([]string, 0, len(v))
		for _, e := range v {
			if s, ok := e.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}
