// Package reqlog lets a handler add what it learnt to its request's log
// line, so that a request leaves one line however many layers it passes:
// api's request middleware writes the line, with the attributes added here
// after its own. A line is one write to the log; at thousands of webhooks
// a second, a second line per request costs as much again.
package reqlog

import (
	"log/slog"

	"github.com/labstack/echo/v4"
)

// key is where the attributes wait in the request's echo.Context.
const key = "paygate.reqlog"

// Add appends attrs to c's request line. Never add a header, a body, a
// token or payment data: the line goes to the log as it is.
func Add(c echo.Context, attrs ...slog.Attr) {
	added, _ := c.Get(key).([]slog.Attr)
	c.Set(key, append(added, attrs...))
}

// Attrs is what handlers added to c's request line, in the order added.
func Attrs(c echo.Context) []slog.Attr {
	added, _ := c.Get(key).([]slog.Attr)
	return added
}
