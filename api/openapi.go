package api

import (
	_ "embed"
	"net/http"

	"github.com/labstack/echo/v4"
)

// OpenAPI is the OpenAPI 3.1 document of the webhook endpoint and the whole
// /v1 API, served at GET /openapi.json. A test checks it against the routes
// Echo really has, both ways.
//
//go:embed openapi.json
var OpenAPI []byte

func serveOpenAPI(c echo.Context) error {
	return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, OpenAPI)
}
