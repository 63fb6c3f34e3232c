// Package durability says what paygate's 2xx is worth: whether an event
// acknowledged now survives losing the PostgreSQL primary, read from the
// server paygate's own sessions write to (their synchronous_commit, the
// server's synchronous_standby_names, the standbys streaming from it), and
// what brings back an acknowledged event a failover lost.
//
// A provider never sends an acknowledged event again, so an event committed
// on the primary alone and lost with it is gone unless something lists the
// provider's events. That is why the answer is given at start, in /readyz
// and by `paygate doctor`, rather than left to be learnt from a failover.
//
// It only reads the server's settings and statistics; it must never change
// them, nor touch paygate's tables.
package durability

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Survives is the answer to "does an acknowledged event survive losing the
// primary?".
type Survives string

// The answers.
const (
	// Yes: every commit waits until a synchronous standby has flushed it
	// (synchronous_commit on or remote_apply, synchronous_standby_names
	// set), and one streams now: a failover to it loses nothing
	// acknowledged.
	Yes Survives = "yes"
	// No: a commit is acknowledged before any standby has it on disk; a
	// failover loses the last events acknowledged.
	No Survives = "no"
	// Unknown: what decides it cannot be read; Report.Reason says why.
	Unknown Survives = "unknown"
)

// Standby is one WAL sender of the primary, as pg_stat_replication shows it
// to paygate's role.
type Standby struct {
	Name string // its application_name
	// State and SyncState are pg_stat_replication's ("streaming",
	// "sync"…); Hidden when the role may not see them (they need
	// pg_read_all_stats: PostgreSQL shows other roles only a WAL sender's
	// pid and name).
	State, SyncState string
	Hidden           bool
}

// Server is what the server paygate writes to says about replication, as
// paygate's sessions see it.
type Server struct {
	Role string // current_user
	// SynchronousCommit is the session's: the server's default, or the
	// role's, the database's or the URL's.
	SynchronousCommit string
	StandbyNames      string // synchronous_standby_names
	InRecovery        bool   // a standby: it takes no writes
	Standbys          []Standby
}

// Recovery is what can bring back events a failover lost.
type Recovery struct {
	// StripeAPIKey: a Stripe API key is configured, so Stripe's events
	// list (30 days) can be swept.
	StripeAPIKey bool
	// StripeSweepOff: the periodic sweep is turned off
	// (PAYGATE_STRIPE_SWEEP_EVERY=0); `paygate sweep` still works.
	StripeSweepOff bool
}

// Report is the verdict.
type Report struct {
	Survives Survives
	// Reason says why, in a sentence or two an operator can act on. It
	// names settings and counts, never a host or a standby.
	Reason string
	// CommitsWait: synchronous replication is asked for, but no
	// synchronous standby streams, so every commit waits (webhooks get
	// 503 until one does). Acknowledged events still survive: nothing is
	// acknowledged meanwhile.
	CommitsWait bool
	// Recovery says what brings back an acknowledged event lost with the
	// primary.
	Recovery string
	// Server is what was read (zero when the read failed).
	Server Server
}

// Querier runs queries: a pool, a connection or a transaction.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// readSQL reads it all in one round trip. pg_stat_replication is readable
// by every role, but a role without pg_read_all_stats sees NULL in its
// state and sync_state.
const readSQL = `
	SELECT current_user, current_setting('synchronous_commit'), current_setting('synchronous_standby_names'),
	       pg_is_in_recovery(), coalesce(r.application_name, ''), r.state, r.sync_state
	FROM (SELECT 1) one
	LEFT JOIN pg_stat_replication r ON true
	ORDER BY r.application_name`

// Read reads the server's settings and standbys through db, as paygate's
// sessions see them.
func Read(ctx context.Context, db Querier) (Server, error) {
	rows, err := db.Query(ctx, readSQL)
	if err != nil {
		return Server{}, fmt.Errorf("read replication settings: %w", err)
	}
	defer rows.Close()
	var s Server
	for rows.Next() {
		var name string
		var state, sync *string
		if err := rows.Scan(&s.Role, &s.SynchronousCommit, &s.StandbyNames, &s.InRecovery, &name, &state, &sync); err != nil {
			return Server{}, fmt.Errorf("read replication settings: %w", err)
		}
		if name == "" && state == nil && sync == nil {
			continue // the LEFT JOIN's row when no standby connects
		}
		st := Standby{Name: name, Hidden: state == nil}
		if state != nil {
			st.State = *state
		}
		if sync != nil {
			st.SyncState = *sync
		}
		s.Standbys = append(s.Standbys, st)
	}
	if err := rows.Err(); err != nil {
		return Server{}, fmt.Errorf("read replication settings: %w", err)
	}
	return s, nil
}

// Check reads the server through db and assesses it; a read that fails
// gives Unknown with the error as the reason, never an error: the answer
// is information, not a precondition.
func Check(ctx context.Context, db Querier, r Recovery) Report {
	s, err := Read(ctx, db)
	if err != nil {
		return Report{Survives: Unknown, Reason: "the replication settings could not be read: " + err.Error(),
			Recovery: r.describe()}
	}
	return Assess(s, r)
}

// SynchronousStandbys are the standbys that stream and count for
// synchronous commit.
func (s Server) SynchronousStandbys() []Standby {
	var out []Standby
	for _, st := range s.Standbys {
		if st.State == "streaming" && (st.SyncState == "sync" || st.SyncState == "quorum") {
			out = append(out, st)
		}
	}
	return out
}

func (s Server) hidden() int {
	n := 0
	for _, st := range s.Standbys {
		if st.Hidden {
			n++
		}
	}
	return n
}

// Assess gives the verdict on s. remote_write counts as below on, as the
// contract says: it acknowledges once the standby has handed the commit to
// its operating system, not flushed it, so PostgreSQL's documentation
// guarantees it only against a crash of the standby's PostgreSQL, not of
// its machine, and the fault that takes a primary down (power, a zone) may
// take the standby's machine with it.
func Assess(s Server, r Recovery) Report {
	rep := Report{Server: s, Recovery: r.describe()}
	commit := strings.ToLower(strings.TrimSpace(s.SynchronousCommit))
	names := strings.TrimSpace(s.StandbyNames)
	switch {
	case s.InRecovery:
		rep.Survives = Unknown
		rep.Reason = "paygate is connected to a standby (in recovery), which takes no writes: " +
			"name the primary in DATABASE_URL, or list every host with target_session_attrs=read-write"
	case names == "":
		rep.Survives = No
		rep.Reason = "synchronous_standby_names is empty, so no standby is synchronous: a commit is acknowledged " +
			"once it is on the primary's disk, and a failover to an asynchronous standby loses the events acknowledged " +
			"in the moments before it (set synchronous_standby_names on the primary, and keep synchronous_commit on; a managed " +
			"service that replicates synchronously below PostgreSQL, as Cloud SQL's high availability and RDS Multi-AZ DB " +
			"instances do, keeps them anyway, which PostgreSQL cannot show)"
	case commit == "off" || commit == "local" || commit == "remote_write":
		rep.Survives = No
		rep.Reason = fmt.Sprintf("synchronous_commit is %s for paygate's sessions, below on: %s, so a failover can lose "+
			"the events acknowledged in the moments before it (set synchronous_commit = on, in the server's settings, "+
			"for the role, the database, or in DATABASE_URL)", commit, commitMeaning(commit))
	case commit != "on" && commit != "remote_apply":
		rep.Survives = Unknown
		rep.Reason = fmt.Sprintf("synchronous_commit is %q, a value paygate does not know", commit)
	default:
		sync := s.SynchronousStandbys()
		hidden := s.hidden()
		switch {
		case len(sync) > 0:
			rep.Survives = Yes
			rep.Reason = fmt.Sprintf("synchronous_commit is %s and %s streams: every acknowledged event is on "+
				"its disk too, and a failover to it loses nothing acknowledged", commit, plural(len(sync), "synchronous standby", "synchronous standbys"))
		case hidden > 0:
			rep.Survives = Unknown
			rep.Reason = fmt.Sprintf("synchronous_standby_names is set and synchronous_commit is %s, so every commit "+
				"waits for a synchronous standby; but role %s cannot see whether the standbys streaming from the primary "+
				"(%d) are synchronous (pg_stat_replication's state and sync_state need pg_read_all_stats): GRANT pg_monitor TO %s",
				commit, s.Role, hidden, s.Role)
		default:
			rep.Survives = Yes
			rep.CommitsWait = true
			rep.Reason = fmt.Sprintf("synchronous_standby_names is set and synchronous_commit is %s, but %s: every "+
				"commit waits until a standby it names streams, so webhooks are answered 503 meanwhile (start the "+
				"standby, or fix synchronous_standby_names to name it)", commit, noSyncStandby(s))
		}
	}
	return rep
}

func noSyncStandby(s Server) string {
	if len(s.Standbys) == 0 {
		return "no standby streams from the primary"
	}
	if len(s.Standbys) == 1 {
		return "the one standby streaming from the primary is not synchronous"
	}
	return fmt.Sprintf("none of the %d standbys streaming from the primary is synchronous", len(s.Standbys))
}

func commitMeaning(commit string) string {
	switch commit {
	case "off":
		return "a commit is acknowledged before it is even on the primary's disk"
	case "local":
		return "a commit is acknowledged once on the primary's disk, before any standby has it"
	default: // remote_write
		return "a commit is acknowledged once a standby has handed it to its operating system, before it is on the standby's disk"
	}
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

func (r Recovery) describe() string {
	const adyen = "Adyen's are not recoverable this way: Adyen offers no list of the notifications it sent"
	switch {
	case !r.StripeAPIKey:
		return "nothing brings back an acknowledged event lost with the primary: the provider counts it delivered. " +
			"With a Stripe API key (PAYGATE_STRIPE_API_KEY) the missed-event sweep brings back Stripe's, up to 30 days old; " + adyen
	case r.StripeSweepOff:
		return "the missed-event sweep is off (PAYGATE_STRIPE_SWEEP_EVERY=0): `paygate sweep --since` brings back " +
			"Stripe events lost with the primary, up to 30 days old, when run; " + adyen
	default:
		return "the missed-event sweep brings back Stripe events lost with the primary at its next run " +
			"(Stripe keeps its events list 30 days); " + adyen
	}
}
