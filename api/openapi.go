package api

import (
	_ "embed"
	"net/http"

	"github.com/labstack/echo/v4"
)

// OpenAPI is the OpenAPI 3.1 document of the webhook endpoint and the whole
// /v1 API, served at GET /openapi.json. Tests check it against the routes
// Echo really has, both ways; validate every request and answer of the
// package's tests against it (contract_test.go); lint it with Redocly CLI's
// recommended rules; and keep the client generated from it (api/client)
// current.
//
//go:embed openapi.json
var OpenAPI []byte

func serveOpenAPI(c echo.Context) error {
	return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, OpenAPI)
}
