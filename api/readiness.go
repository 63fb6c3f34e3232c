package api

import (
	"context"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/paygate/paygate/durability"
)

// Readiness is /readyz's answer when ready.
type Readiness struct {
	Status     string         `json:"status"`
	Durability DurabilityView `json:"durability"`
}

// DurabilityView says what a 2xx is worth (durability.Report): whether an
// event acknowledged now survives losing the database's primary, why, and
// what brings back one a failover lost.
type DurabilityView struct {
	SurvivesPrimaryLoss durability.Survives `json:"survives_primary_loss"`
	Reason              string              `json:"reason"`
	CommitsWait         bool                `json:"commits_wait"`
	Recovery            string              `json:"recovery"`
}

// durabilityTimeout bounds the replication read: readiness is answered
// promptly whatever it finds, an unanswered read being "unknown".
const durabilityTimeout = 2 * time.Second

func (s *Server) ready(c echo.Context) error {
	ctx, cancel := context.WithTimeout(c.Request().Context(), durabilityTimeout)
	defer cancel()
	r := durability.Check(ctx, s.config.Pool, s.config.Durability)
	return writeJSON(c, http.StatusOK, Readiness{Status: "ready", Durability: DurabilityView{
		SurvivesPrimaryLoss: r.Survives, Reason: r.Reason, CommitsWait: r.CommitsWait, Recovery: r.Recovery,
	}})
}
