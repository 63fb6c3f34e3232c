package console

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/paygate/paygate/signin"
)

// Sign-in with the company's identity provider. The flow's cookie is
// SameSite=Lax, not Strict like the session's: it must come back with the
// provider's redirect, a navigation from another site. For the same reason
// the callback does not redirect to the console: a redirect would carry on
// the provider's cross-site navigation, in which the browser withholds the
// new Strict session cookie; the callback's page moves on by itself, a
// navigation of the console's own.

const (
	flowCookie = "paygate_oidc"
	flowPath   = basePath + "/oidc"
	// providerTimeout bounds a sign-in's calls to the provider (discovery,
	// keys, the token endpoint).
	providerTimeout = 30 * time.Second
)

func (c *Console) secureCookies() bool {
	u, err := url.Parse(c.cfg.PublicURL)
	return err == nil && u.Scheme == "https"
}

func (c *Console) setFlowCookie(ec echo.Context, value string, maxAge int) {
	ec.SetCookie(&http.Cookie{
		Name: flowCookie, Value: value, Path: flowPath, HttpOnly: true,
		SameSite: http.SameSiteLaxMode, Secure: c.secureCookies(), MaxAge: maxAge,
	})
}

// providerName is how the sign-in page names the provider: its issuer's
// host.
func (c *Console) providerName() string {
	if c.cfg.SignIn == nil {
		return ""
	}
	if u, err := url.Parse(c.cfg.SignIn.Issuer()); err == nil && u.Host != "" {
		return u.Host
	}
	return c.cfg.SignIn.Issuer()
}

// oidcLogin sends the browser to the provider with a fresh flow.
func (c *Console) oidcLogin(ec echo.Context) error {
	if c.cfg.SignIn == nil {
		return c.refuse(ec, http.StatusNotFound, "Sign-in with an identity provider is not configured here.")
	}
	ctx, cancel := context.WithTimeout(ec.Request().Context(), providerTimeout)
	defer cancel()
	flow, err := c.cfg.SignIn.Begin(ctx)
	if err != nil {
		c.logWarn(ec, "console: begin sign-in", err)
		return c.renderSignin(ec, http.StatusServiceUnavailable, "The identity provider cannot be reached right now: try again shortly.")
	}
	c.setFlowCookie(ec, flow.Cookie, int(c.cfg.SignIn.FlowTTL().Seconds()))
	return ec.Redirect(http.StatusSeeOther, flow.AuthURL)
}

// signedInData is the page a successful callback answers with.
type signedInData struct {
	Name string
}

// noRoleData is the page of a person the provider signed in but whose
// claim maps to no console role.
type noRoleData struct {
	Name, Provider, Claim string
	Groups                []string
	Ops, Finance          []string
	Contact               string
}

// oidcCallback takes the provider's answer: the flow is finished (once),
// the ID token verified, and the person signed in with the roles their
// claim maps to, or refused.
func (c *Console) oidcCallback(ec echo.Context) error {
	p := c.cfg.SignIn
	if p == nil {
		return c.refuse(ec, http.StatusNotFound, "Sign-in with an identity provider is not configured here.")
	}
	var cookie string
	if ck, err := ec.Cookie(flowCookie); err == nil {
		cookie = ck.Value
	}
	c.setFlowCookie(ec, "", -1)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ec.Request().Context()), providerTimeout)
	defer cancel()
	person, err := p.Finish(ctx, cookie, ec.QueryParams())
	var refused *signin.ProviderError
	switch {
	case err == nil:
	case errors.Is(err, signin.ErrState), errors.Is(err, signin.ErrFlowUsed):
		c.logWarn(ec, "console: sign-in refused", err)
		return c.renderSignin(ec, http.StatusBadRequest,
			"This sign-in was not started by this browser, was used already, or took too long: sign in again.")
	case errors.As(err, &refused):
		return c.renderSignin(ec, http.StatusUnauthorized, "The identity provider did not sign you in ("+refused.Code+").")
	case errors.Is(err, signin.ErrUnavailable):
		c.logWarn(ec, "console: sign-in", err)
		return c.renderSignin(ec, http.StatusServiceUnavailable, "The identity provider cannot be reached right now: try again shortly.")
	case errors.Is(err, signin.ErrExchange), errors.Is(err, signin.ErrIDToken):
		c.logWarn(ec, "console: sign-in refused", err)
		return c.renderSignin(ec, http.StatusUnauthorized,
			"The identity provider's answer could not be verified, so you are not signed in: sign in again, and tell paygate's operators if it happens again.")
	default:
		c.cfg.Logger.Error("console: finish sign-in", "error", err.Error(),
			"request_id", ec.Response().Header().Get(echo.HeaderXRequestID))
		return c.renderSignin(ec, http.StatusServiceUnavailable, "The console could not finish your sign-in: try again shortly.")
	}
	// What the claim says now is what holds: the person's other sessions
	// take these roles, or end without any.
	if err := c.regrant(ec, person.Issuer, person.Subject, person.Ops, person.Finance); err != nil {
		c.cfg.Logger.Error("console: apply roles to sessions", "error", err.Error(),
			"request_id", ec.Response().Header().Get(echo.HeaderXRequestID))
		return c.renderSignin(ec, http.StatusServiceUnavailable, "The console could not keep your session: try again shortly.")
	}
	if !person.Ops && !person.Finance {
		c.cfg.Logger.Info("console: sign-in without a role", "person", person.Name())
		return c.render(ec, http.StatusForbidden, "norole", "No access to the console", noRoleData{
			Name: person.Name(), Provider: c.providerName(), Claim: p.RolesClaim(), Groups: person.Groups,
			Ops: p.Roles().Values(signin.RoleOps), Finance: p.Roles().Values(signin.RoleFinance),
			Contact: c.cfg.AccessContact,
		})
	}
	s := &session{person: true, issuer: person.Issuer, subject: person.Subject, email: person.Email,
		name: person.Name(), ops: person.Ops, finance: person.Finance}
	if err := c.startSession(ec, s); err != nil {
		c.cfg.Logger.Error("console: store session", "error", err.Error(),
			"request_id", ec.Response().Header().Get(echo.HeaderXRequestID))
		return c.renderSignin(ec, http.StatusServiceUnavailable, "The console could not keep your session: try again shortly.")
	}
	return c.render(ec, http.StatusOK, "signedin", "Signed in", signedInData{Name: s.name})
}

// logWarn logs a refused or failed sign-in: go-oidc's and oauth2's errors
// name what failed (a claim, a status), never a token.
func (c *Console) logWarn(ec echo.Context, msg string, err error) {
	c.cfg.Logger.Warn(msg, "error", err.Error(), "request_id", ec.Response().Header().Get(echo.HeaderXRequestID))
}

// providerLogout is the provider's logout for a person who signed out
// here, sending them back to the sign-in page; "" when the provider has
// none.
func (c *Console) providerLogout(ec echo.Context) string {
	if c.cfg.SignIn == nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(ec.Request().Context(), providerTimeout)
	defer cancel()
	back := ""
	if c.cfg.PublicURL != "" {
		back = strings.TrimRight(c.cfg.PublicURL, "/") + basePath + "/signin"
	}
	return c.cfg.SignIn.LogoutURL(ctx, back)
}
