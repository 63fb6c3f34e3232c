package api

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"
	"riverqueue.com/riverui"

	"github.com/paygate/paygate/jobs"
)

// riverUIPrefix is where River's UI is mounted.
const riverUIPrefix = "/riverui"

// mountRiverUI serves River's UI and its JSON API under /riverui, for the
// ops tokens only: River UI has no authentication of its own, and it can
// cancel, retry and delete jobs. Job arguments are hidden by default (ours
// carry only event keys, but a glance at a list should not need them).
func (s *Server) mountRiverUI(e *echo.Echo) {
	var h http.Handler
	ui, err := riverui.NewHandler(&riverui.HandlerOpts{
		Endpoints:                riverui.NewEndpoints(s.config.Jobs.River, nil),
		JobListHideArgsByDefault: true,
		Logger:                   s.config.Logger,
		Prefix:                   riverUIPrefix,
	})
	if err != nil {
		// Only a broken build gets here (the UI's assets are embedded);
		// the API itself must still serve.
		s.config.Logger.Error("river ui unavailable", "error", err.Error())
		h = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "River UI unavailable", http.StatusServiceUnavailable)
		})
	} else {
		s.ops.riverUI = ui
		h = ui
	}
	wrapped := echo.WrapHandler(h)
	e.Any(riverUIPrefix, wrapped, s.opsBrowserAuth)
	e.Any(riverUIPrefix+"/*", wrapped, s.opsBrowserAuth, s.processingReadOnly)
}

// riverUIJobActions are River UI's API calls that change jobs by id.
var riverUIJobActions = map[string]bool{
	riverUIPrefix + "/api/jobs/cancel": true,
	riverUIPrefix + "/api/jobs/delete": true,
	riverUIPrefix + "/api/jobs/retry":  true,
}

// maxRiverUIActionBody bounds a River UI job action's body: River UI takes
// at most 1000 ids.
const maxRiverUIActionBody = 64 << 10

// errProcessingReadOnly is what River UI answers for a change to a job
// that applies inbox events.
var errProcessingReadOnly = withDetail(ErrForbidden,
	"process_event and apply_events jobs are read-only in River UI: a retry, cancel or delete there would change the job without its "+
		"inbox events and without an audit entry. Use POST /v1/ops/events/{provider}/{event_id}/replay, "+
		"POST /v1/ops/events/{provider}/{event_id}/discard or POST /v1/ops/replay instead")

// processingReadOnly refuses River UI's cancel, delete and retry when any
// job they name applies inbox events (process_event, apply_events); jobs
// of other kinds pass. The ids
// are read as River UI reads them (strings or numbers under "ids"); a body
// that cannot be read so is refused rather than passed on unchecked.
func (s *Server) processingReadOnly(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		req := c.Request()
		if !riverUIJobActions[strings.TrimSuffix(path.Clean(req.URL.Path), "/")] {
			return next(c)
		}
		body, err := io.ReadAll(http.MaxBytesReader(c.Response(), req.Body, maxRiverUIActionBody))
		if err != nil {
			return badRequest("the body is larger than %d bytes", maxRiverUIActionBody)
		}
		var action struct {
			IDs []riverJobID `json:"ids"`
		}
		if err := json.Unmarshal(body, &action); err != nil {
			return badRequest(`the body must be {"ids": [job ids]}`)
		}
		ids := make([]int64, len(action.IDs))
		for i, id := range action.IDs {
			ids[i] = int64(id)
		}
		if len(ids) > 0 {
			found, err := jobs.EventJobs(req.Context(), s.config.Pool, ids)
			if err != nil {
				return err
			}
			if len(found) > 0 {
				return errProcessingReadOnly
			}
		}
		req.Body = io.NopCloser(bytes.NewReader(body))
		return next(c)
	}
}

// riverJobID is a job id as River UI's API takes it: a JSON string of
// digits, or a number.
type riverJobID int64

func (id *riverJobID) UnmarshalJSON(data []byte) error {
	s := string(data)
	if len(s) > 1 && s[0] == '"' {
		s = s[1 : len(s)-1]
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return fmt.Errorf("job id %s: %w", data, err)
	}
	*id = riverJobID(n)
	return nil
}

// Start starts the background services of what NewEcho mounted (River UI's
// caches); they stop when ctx is done.
func (s *Server) Start(ctx context.Context) error {
	if s.ops.riverUI == nil {
		return nil
	}
	if err := s.ops.riverUI.Start(ctx); err != nil {
		return fmt.Errorf("start river ui: %w", err)
	}
	return nil
}

// opsBrowserAuth lets an ops token through, sent as a bearer token or as the
// password of HTTP basic authentication (any user name), so that a browser's
// own login prompt works: browsers cannot send bearer headers. Since a
// browser resends basic credentials on its own, a state-changing request
// from another site is refused (CSRF).
func (s *Server) opsBrowserAuth(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		req := c.Request()
		// The same limit on failed authentications as /v1's.
		addr := addrKey(c.RealIP())
		if left := s.limiter.refusedFor(req.Context(), addr); left > 0 {
			return s.limiter.refuse(c, left)
		}
		token := ""
		scheme, rest, _ := strings.Cut(req.Header.Get(echo.HeaderAuthorization), " ")
		switch {
		case strings.EqualFold(scheme, "Bearer"):
			token = strings.TrimSpace(rest)
		case strings.EqualFold(scheme, "Basic"):
			if raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(rest)); err == nil {
				_, token, _ = strings.Cut(string(raw), ":")
			}
		}
		caller, ok := s.auth.identify(token)
		if !ok {
			c.Response().Header().Set(echo.HeaderWWWAuthenticate, `Basic realm="paygate ops", charset="UTF-8"`)
			if req.Header.Get(echo.HeaderAuthorization) != "" {
				s.limiter.fail(req.Context(), addr, "unknown_token", c)
			}
			return ErrUnauthorized
		}
		if !caller.Roles[RoleOps] {
			return ErrForbidden
		}
		if !safeMethod(req.Method) && crossSite(req) {
			return fmt.Errorf("%w: cross-site request refused", ErrForbidden)
		}
		c.Set(callerKey, caller)
		return next(c)
	}
}

func safeMethod(m string) bool {
	return m == http.MethodGet || m == http.MethodHead || m == http.MethodOptions
}

// crossSite reports a request a browser made on another site's behalf.
func crossSite(req *http.Request) bool {
	if site := req.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" && site != "none" {
		return true
	}
	if origin := req.Header.Get(echo.HeaderOrigin); origin != "" {
		u, err := url.Parse(origin)
		if err != nil || !strings.EqualFold(u.Host, req.Host) {
			return true
		}
	}
	return false
}
