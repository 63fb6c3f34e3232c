package api

import "github.com/labstack/echo/v4"

// routes mounts the /v1 routes that build on the ledger and operations.
func (s *Server) routes(v1 *echo.Group) {}

// problemForDomain maps the errors of the ledger and the other domain
// packages.
func problemForDomain(err error) (Problem, bool) { return Problem{}, false }
