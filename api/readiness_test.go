package api_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/api"
	"github.com/paygate/paygate/durability"
	"github.com/paygate/paygate/internal/worldtest"
)

// TestReadinessSaysWhatA2xxIsWorth: /readyz's 200 says whether an
// acknowledged event survives losing the primary, and what brings it back
// otherwise. The test server has no standby and the test pool commits with
// synchronous_commit off: it does not.
func TestReadinessSaysWhatA2xxIsWorth(t *testing.T) {
	t.Parallel()
	w := worldtest.New(t, nil)
	for _, tc := range []struct {
		recovery durability.Recovery
		says     string
	}{
		{durability.Recovery{}, "nothing brings back"},
		{durability.Recovery{StripeAPIKey: true}, "the missed-event sweep brings back Stripe events"},
	} {
		e, _ := newAPI(t, api.Config{Pool: w.Pool, Jobs: w.Jobs, Durability: tc.recovery})
		var body api.Readiness
		rec := get(t, e, "/readyz", "", &body)
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
		require.Equal(t, "ready", body.Status)
		require.Equal(t, durability.No, body.Durability.SurvivesPrimaryLoss, body.Durability.Reason)
		require.NotEmpty(t, body.Durability.Reason)
		require.False(t, body.Durability.CommitsWait)
		require.Contains(t, body.Durability.Recovery, tc.says)
	}
}
