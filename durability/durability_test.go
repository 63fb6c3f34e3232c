package durability_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/durability"
	"github.com/paygate/paygate/internal/testdb"
)

func TestAssess(t *testing.T) {
	t.Parallel()
	sync := durability.Standby{Name: "n2", State: "streaming", SyncState: "sync"}
	quorum := durability.Standby{Name: "n3", State: "streaming", SyncState: "quorum"}
	async := durability.Standby{Name: "n4", State: "streaming", SyncState: "async"}
	potential := durability.Standby{Name: "n5", State: "streaming", SyncState: "potential"}
	catchingUp := durability.Standby{Name: "n2", State: "catchup", SyncState: "sync"}
	hidden := durability.Standby{Name: "n2", Hidden: true}
	for _, tc := range []struct {
		name        string
		server      durability.Server
		want        durability.Survives
		commitsWait bool
		reason      string
	}{
		{"no standby names", durability.Server{SynchronousCommit: "on", Standbys: []durability.Standby{async}},
			durability.No, false, "synchronous_standby_names is empty"},
		{"sync standby, commit on", durability.Server{SynchronousCommit: "on", StandbyNames: "n2", Standbys: []durability.Standby{sync}},
			durability.Yes, false, "1 synchronous standby streams"},
		{"sync standby, remote_apply", durability.Server{SynchronousCommit: "remote_apply", StandbyNames: "FIRST 1 (n2)", Standbys: []durability.Standby{sync, potential}},
			durability.Yes, false, "synchronous_commit is remote_apply"},
		{"quorum", durability.Server{SynchronousCommit: "on", StandbyNames: "ANY 1 (n3, n4)", Standbys: []durability.Standby{quorum, async}},
			durability.Yes, false, "1 synchronous standby streams"},
		{"remote_write is below on", durability.Server{SynchronousCommit: "remote_write", StandbyNames: "n2", Standbys: []durability.Standby{sync}},
			durability.No, false, "synchronous_commit is remote_write"},
		{"local", durability.Server{SynchronousCommit: "local", StandbyNames: "n2", Standbys: []durability.Standby{sync}},
			durability.No, false, "before any standby has it"},
		{"off", durability.Server{SynchronousCommit: "off", StandbyNames: "n2", Standbys: []durability.Standby{sync}},
			durability.No, false, "synchronous_commit is off"},
		{"names set, standby async", durability.Server{SynchronousCommit: "on", StandbyNames: "n9", Standbys: []durability.Standby{async}},
			durability.Yes, true, "the one standby streaming from the primary is not synchronous"},
		{"names set, standby catching up", durability.Server{SynchronousCommit: "on", StandbyNames: "n2", Standbys: []durability.Standby{catchingUp}},
			durability.Yes, true, "every commit waits"},
		{"names set, no standby", durability.Server{SynchronousCommit: "on", StandbyNames: "n2"},
			durability.Yes, true, "no standby streams from the primary"},
		{"standby hidden from the role", durability.Server{Role: "paygate_app", SynchronousCommit: "on", StandbyNames: "n2", Standbys: []durability.Standby{hidden}},
			durability.Unknown, false, "GRANT pg_monitor TO paygate_app"},
		{"hidden, settings below on", durability.Server{Role: "paygate_app", SynchronousCommit: "local", StandbyNames: "n2", Standbys: []durability.Standby{hidden}},
			durability.No, false, "synchronous_commit is local"},
		{"connected to a standby", durability.Server{SynchronousCommit: "on", StandbyNames: "n2", InRecovery: true},
			durability.Unknown, false, "target_session_attrs=read-write"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := durability.Assess(tc.server, durability.Recovery{})
			require.Equal(t, tc.want, r.Survives, r.Reason)
			require.Equal(t, tc.commitsWait, r.CommitsWait, r.Reason)
			require.Contains(t, r.Reason, tc.reason)
			require.NotContains(t, r.Reason, "n2", "the reason names no standby")
		})
	}
}

func TestRecovery(t *testing.T) {
	t.Parallel()
	s := durability.Server{SynchronousCommit: "on"}
	none := durability.Assess(s, durability.Recovery{}).Recovery
	require.Contains(t, none, "nothing brings back")
	require.Contains(t, none, "PAYGATE_STRIPE_API_KEY")
	swept := durability.Assess(s, durability.Recovery{StripeAPIKey: true}).Recovery
	require.Contains(t, swept, "the missed-event sweep brings back Stripe events")
	require.Contains(t, swept, "30 days")
	off := durability.Assess(s, durability.Recovery{StripeAPIKey: true, StripeSweepOff: true}).Recovery
	require.Contains(t, off, "paygate sweep --since")
	for _, r := range []string{none, swept, off} {
		require.Contains(t, r, "Adyen's are not recoverable this way")
	}
}

// TestCheckReadsTheSession: the settings are the session's as paygate's
// pool has them (the test pool commits with synchronous_commit off), on a
// server without standbys.
func TestCheckReadsTheSession(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	ctx := context.Background()
	s, err := durability.Read(ctx, pool)
	require.NoError(t, err)
	require.Equal(t, "off", s.SynchronousCommit)
	require.False(t, s.InRecovery)
	var user, names string
	require.NoError(t, pool.QueryRow(ctx, `SELECT current_user, current_setting('synchronous_standby_names')`).Scan(&user, &names))
	require.Equal(t, user, s.Role)
	require.Equal(t, names, s.StandbyNames)

	r := durability.Check(ctx, pool, durability.Recovery{StripeAPIKey: true})
	require.Equal(t, durability.No, r.Survives, r.Reason)

	canceled, cancel := context.WithCancel(ctx)
	cancel()
	r = durability.Check(canceled, pool, durability.Recovery{})
	require.Equal(t, durability.Unknown, r.Survives)
	require.Contains(t, r.Reason, "could not be read")
}
