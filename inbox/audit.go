package inbox

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Action is what an operator (or the sweeper, on its own) did to an event;
// it is stored in the audit log.
type Action string

const (
	ActionReplay     Action = "replay"      // one event replayed
	ActionBulkReplay Action = "bulk_replay" // one event of a replay by filter
	ActionDiscard    Action = "discard"     // one event set aside, with a reason
	ActionSweep      Action = "sweep"       // one event whose job vanished, re-enqueued by the sweeper
	// The refund saga's entries name the refund request (rr_…) in EventID
	// and its payment's provider in Provider.
	ActionRefundRequest Action = "refund_request" // an operator asked for a refund
	ActionRefundFailed  Action = "refund_failed"  // a refund request failed: refused, reported failed, or past the key window
	// A resolution of a reconciliation exception names the item's id in
	// EventID and its run's provider in Provider.
	ActionReconciliationResolve Action = "reconciliation_resolve"
	// A month closed by finance names the period (YYYY-MM) in EventID and
	// AuditProviderLedger in Provider.
	ActionPeriodClose Action = "period_close"
	// A double charge dismissed by ops names its reference in EventID and
	// AuditProviderPayments in Provider, with ops' note as its Reason.
	ActionDoubleChargeDismiss Action = "double_charge_dismiss"
)

// AuditProviderLedger is the Provider of the audit entries about the books
// themselves (a closed period), which belong to no provider.
const AuditProviderLedger = "ledger"

// AuditProviderPayments is the Provider of the audit entries about a
// merchant's reference (a double charge), whose payments may be at several
// providers.
const AuditProviderPayments = "payments"

// Operation says who acts and why. Every operator action records it in the
// audit log, in the transaction of the action itself.
type Operation struct {
	Actor          string // the API caller's identity, or "cli:" + the OS user
	Reason         string
	IdempotencyKey string // empty outside the API
}

// AuditEntry is one row of the append-only audit log.
type AuditEntry struct {
	ID             int64
	At             time.Time
	Actor          string
	Action         Action
	Provider       string
	EventID        string
	Reason         string
	IdempotencyKey string
}

// ErrNoActor is returned when an action has no actor: the log must name who
// acted.
var ErrNoActor = errors.New("an operator action needs an actor")

// AppendAuditTx records that op did action to the events in keys, one entry
// per event, in one statement.
//
// It fails with ErrNoActor, and ErrReasonRequired for a discard without a
// reason.
func AppendAuditTx(ctx context.Context, tx pgx.Tx, action Action, op Operation, keys ...Key) error {
	if strings.TrimSpace(op.Actor) == "" {
		return ErrNoActor
	}
	if action == ActionDiscard && strings.TrimSpace(op.Reason) == "" {
		return ErrReasonRequired
	}
	if len(keys) == 0 {
		return nil
	}
	providers := make([]string, len(keys))
	ids := make([]string, len(keys))
	for i, k := range keys {
		providers[i], ids[i] = k.Provider, k.EventID
	}
	_, err := tx.Exec(ctx, `
		INSERT INTO ops_audit_log (actor, action, provider, event_id, reason, idempotency_key)
		SELECT $1, $2, p, e, nullif($3, ''), nullif($4, '')
		FROM unnest($5::text[], $6::text[]) WITH ORDINALITY AS k(p, e, n)
		ORDER BY n`,
		op.Actor, string(action), op.Reason, op.IdempotencyKey, providers, ids)
	if err != nil {
		return fmt.Errorf("append audit %s: %w", action, err)
	}
	return nil
}

func auditCursor(id int64) string {
	return base64.RawURLEncoding.EncodeToString([]byte("a1:" + strconv.FormatInt(id, 10)))
}

func parseAuditCursor(s string) (int64, error) {
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return 0, ErrBadCursor
	}
	rest, ok := strings.CutPrefix(string(raw), "a1:")
	if !ok {
		return 0, ErrBadCursor
	}
	id, err := strconv.ParseInt(rest, 10, 64)
	if err != nil {
		return 0, ErrBadCursor
	}
	return id, nil
}

// AuditFilter selects audit entries; zero fields select everything.
type AuditFilter struct {
	Provider string
	EventID  string
}

// ListAudit returns audit entries newest first, one page at a time. next is
// the cursor of the following page, empty at the end.
//
// It fails with ErrBadCursor.
func ListAudit(ctx context.Context, q Querier, f AuditFilter, p Page) (entries []AuditEntry, next string, err error) {
	conds := []string{"true"}
	var args []any
	add := func(cond string, v any) {
		args = append(args, v)
		conds = append(conds, fmt.Sprintf(cond, len(args)))
	}
	if f.Provider != "" {
		add("provider = $%d", f.Provider)
	}
	if f.EventID != "" {
		add("event_id = $%d", f.EventID)
	}
	if p.Cursor != "" {
		id, err := parseAuditCursor(p.Cursor)
		if err != nil {
			return nil, "", err
		}
		add("id < $%d", id)
	}
	limit := p.limit()
	args = append(args, limit+1)
	rows, err := q.Query(ctx, `
		SELECT id, at, actor, action, coalesce(provider, ''), coalesce(event_id, ''),
			coalesce(reason, ''), coalesce(idempotency_key, '')
		FROM ops_audit_log WHERE `+strings.Join(conds, " AND ")+
		fmt.Sprintf(` ORDER BY id DESC LIMIT $%d`, len(args)), args...)
	if err != nil {
		return nil, "", fmt.Errorf("list audit log: %w", err)
	}
	entries, err = pgx.CollectRows(rows, pgx.RowToStructByPos[AuditEntry])
	if err != nil {
		return nil, "", fmt.Errorf("list audit log: %w", err)
	}
	if len(entries) > limit {
		entries = entries[:limit]
		next = auditCursor(entries[limit-1].ID)
	}
	return entries, next, nil
}
