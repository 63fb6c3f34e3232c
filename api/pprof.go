package api

import (
	"net/http"
	"net/http/pprof"

	"github.com/labstack/echo/v4"
)

// mountPprof serves Go's profiler under /debug/pprof/ to ops tokens only:
// profiles expose code paths, goroutine stacks and memory contents.
//
//	go tool pprof -http=: -H 'Authorization: Bearer $TOKEN' \
//	    'http://127.0.0.1:8080/debug/pprof/profile?seconds=20'
//
// (curl -H … -o cpu.out works too). The server's 30 s write timeout bounds
// a CPU profile or trace to less than 30 seconds.
func (s *Server) mountPprof(e *echo.Echo) {
	g := e.Group("/debug/pprof", s.authenticate, requireRole(RoleOps))
	g.GET("/cmdline", echo.WrapHandler(http.HandlerFunc(pprof.Cmdline)))
	g.GET("/profile", echo.WrapHandler(http.HandlerFunc(pprof.Profile)))
	g.GET("/symbol", echo.WrapHandler(http.HandlerFunc(pprof.Symbol)))
	g.POST("/symbol", echo.WrapHandler(http.HandlerFunc(pprof.Symbol)))
	g.GET("/trace", echo.WrapHandler(http.HandlerFunc(pprof.Trace)))
	// Index serves the named profiles (heap, goroutine, allocs, block,
	// mutex…) from the path after /debug/pprof/, and the list at the root.
	g.GET("/", echo.WrapHandler(http.HandlerFunc(pprof.Index)))
	g.GET("/*", echo.WrapHandler(http.HandlerFunc(pprof.Index)))
}
