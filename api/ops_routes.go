package api

import (
	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
)

// opsRoutes mounts the operations routes: the poison queue, replay and
// discard, the audit log, the double charges; River's UI behind the ops tokens; and the OpenAPI
// document.
func (s *Server) opsRoutes(e *echo.Echo, v1 *echo.Group) {
	s.ops.actions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "paygate_ops_actions_total",
		Help: "Operator actions on inbox events (replay, bulk_replay, discard), counted per event after commit.",
	}, []string{"action"})
	s.config.Registry.MustRegister(s.ops.actions)

	opsOnly := requireRole(RoleOps)
	v1.GET("/ops/poison", s.listPoison, opsOnly)
	v1.GET("/events", s.listEvents, opsOnly)
	v1.GET("/ops/audit", s.listAudit, opsOnly)
	s.post(v1, "/ops/events/:provider/:event_id/replay", s.replayEvent, reasonRequest{}, RoleOps)
	s.post(v1, "/ops/events/:provider/:event_id/discard", s.discardEvent, reasonRequest{}, RoleOps)
	s.post(v1, "/ops/replay", s.bulkReplay, BulkReplayRequest{}, RoleOps)
	s.doubleChargeRoutes(v1)

	e.GET("/openapi.json", serveOpenAPI)
	if s.config.RiverUI {
		s.mountRiverUI(e)
	}
}
