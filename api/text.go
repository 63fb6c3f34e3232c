package api

import (
	"strings"
	"unicode/utf8"

	"github.com/labstack/echo/v4"
)

// storableText reports whether PostgreSQL can take s as a text parameter:
// valid UTF-8 without NUL. Anything else fails in the database with an
// encoding error, which would otherwise reach the client as a 500.
func storableText(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsRune(s, 0)
}

// refuseUnstorableText answers 400 for a request whose path or query holds
// text PostgreSQL cannot compare (a NUL byte, invalid UTF-8): filters and
// path parameters are bound as data, and such data is the client's error.
func refuseUnstorableText(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if !storableText(c.Request().URL.Path) {
			return badRequest("the path must be valid UTF-8 without NUL characters")
		}
		for name, values := range c.QueryParams() {
			for _, v := range append(values, name) {
				if !storableText(v) {
					return badRequest("query parameters must be valid UTF-8 without NUL characters")
				}
			}
		}
		return next(c)
	}
}
