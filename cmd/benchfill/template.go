package main

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// fillTables are the tables applying an event writes to and that grow with
// the data, parents before children (the order COPY must follow for the
// foreign keys). river_job is left out: River prunes finished jobs, so it
// stays the same size however many events were applied.
var fillTables = []string{
	"inbox_event_keys",
	"inbox_events",
	"payments",
	"double_charges",
	"payment_facts",
	"payment_history",
	"ledger_transactions",
	"ledger_entries",
	"email_outbox",
	"inbox_attempts",
}

// steadyTables are the tables a sample may write to that do not grow with
// a year of events: River's own, the migrations' record, the counts the
// triggers keep, the fill of payments' details (one row), and the outbox's
// messages, which are kept PAYGATE_MESSAGE_RETENTION (30 days), not a
// year, and leave by whole months; with their sequencer's and relays'
// places; and the books' own (a row per closed month, per day of the
// balance snapshot, built by `paygate ledger snapshots` after the fill).
var steadyTables = map[string]bool{
	"river_job": true, "river_leader": true, "river_migration": true, "river_queue": true,
	"river_notification": true, "river_client": true, "river_client_queue": true,
	"paygate_migrations": true, "inbox_status_counts": true, "payment_details_fill": true,
	"messages": true, "message_sequencer": true, "message_relays": true,
	"ledger_books": true, "ledger_periods": true, "ledger_period_exports": true,
	"ledger_balance_snapshots": true, "ledger_balance_stale": true,
}

// generated are the columns the database fills itself (identities and the
// inbox's sequence): nothing refers to them, so COPY leaves them out.
// ledger_transactions.id is kept, with ids drawn from its sequence: the
// entries refer to it.
var generated = map[string]bool{
	"inbox_events.id": true, "payment_history.id": true, "ledger_entries.id": true,
	"email_outbox.id": true, "inbox_attempts.id": true,
}

type colKind int

const (
	kindOther colKind = iota
	kindText
	kindJSON
	kindBytes
	kindTime
	kindTxnID  // ledger_transactions.id
	kindTxnRef // ledger_entries.transaction_id
)

type column struct {
	name string
	kind colKind
}

type tableShape struct {
	name string
	cols []column
}

// readShapes reads each fill table's columns, in table order, from the
// target database: the rows are written as the target's schema has them.
func readShapes(ctx context.Context, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}) ([]tableShape, error) {
	var shapes []tableShape
	for _, t := range fillTables {
		rows, err := q.Query(ctx, `SELECT column_name, data_type FROM information_schema.columns
			WHERE table_schema = current_schema() AND table_name = $1 AND is_generated = 'NEVER'
			ORDER BY ordinal_position`, t)
		if err != nil {
			return nil, fmt.Errorf("columns of %s: %w", t, err)
		}
		s := tableShape{name: t}
		for rows.Next() {
			var name, typ string
			if err := rows.Scan(&name, &typ); err != nil {
				return nil, fmt.Errorf("columns of %s: %w", t, err)
			}
			if generated[t+"."+name] {
				continue
			}
			c := column{name: name}
			switch {
			case t == "ledger_transactions" && name == "id":
				c.kind = kindTxnID
			case t == "ledger_entries" && name == "transaction_id":
				c.kind = kindTxnRef
			case typ == "text" || typ == "character varying":
				c.kind = kindText
			case typ == "json" || typ == "jsonb":
				c.kind = kindJSON
			case typ == "bytea":
				c.kind = kindBytes
			case typ == "timestamp with time zone":
				c.kind = kindTime
			}
			s.cols = append(s.cols, c)
		}
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("columns of %s: %w", t, err)
		}
		if len(s.cols) == 0 {
			return nil, fmt.Errorf("table %s not found: is the database migrated?", t)
		}
		shapes = append(shapes, s)
	}
	return shapes, nil
}

func (s tableShape) names() []string {
	out := make([]string, len(s.cols))
	for i, c := range s.cols {
		out[i] = c.name
	}
	return out
}

func (s tableShape) selectList() string {
	var b []byte
	for i, c := range s.cols {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = append(b, pgx.Identifier{c.name}.Sanitize()...)
		if c.kind == kindJSON {
			b = append(b, "::text"...)
		}
	}
	return string(b)
}

// idPattern matches the provider's object ids (evt_…, pi_…, ch_…, re_…,
// txn_…): a lowercase prefix and 24 letters and digits. Each copy of a
// payment replaces the first idStamp characters after the underscore with
// its own number, so every id of a copy is new and the copy's ids stay
// consistent across its events, payloads, refs and keys.
var idPattern = regexp.MustCompile(`\b[a-z]+_[0-9A-Za-z]{24}\b`)

// unixPattern matches the Unix times of a provider payload ("created":
// 1796126784): they move with the copy's received_at.
var unixPattern = regexp.MustCompile(`": ?(1[5-9][0-9]{8})\b`)

// utcPattern matches the UTC times paygate writes in JSON to the second, as
// an object's value or an array's element after a string ("at":
// "2026-12-06T23:58:04Z"; a payment's details_stamps, ["evt_…",
// "2026-12-06T23:58:04Z", "r"]): they move with the copy's received_at as
// the payloads' Unix times do.
var utcPattern = regexp.MustCompile(`"(?:: ?|, ?)"([0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z)"`)

// utcLayout is utcPattern's time, always 20 characters.
const utcLayout = "2006-01-02T15:04:05Z"

const idStamp = 6

const stampAlphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// stamp writes k in base 62 over b[:idStamp], most significant first, so
// that the copies' ids sort in the order they were filled (their keys'
// index grows at its right edge, as it does under live traffic).
func stamp(b []byte, k int64) {
	for i := idStamp - 1; i >= 0; i-- {
		b[i] = stampAlphabet[k%62]
		k /= 62
	}
}

type patch struct {
	off  int
	unix int64 // 0: an id's stamp at off; else the Unix time written at off
	utc  bool  // unix is written as utcLayout
}

// value is one column of one sample row, ready to be written again with
// another stamp and time shift.
type value struct {
	kind    colKind
	raw     any
	bytes   []byte
	patches []patch
	time    time.Time
	txnID   int64
}

// row is one sample row of one table.
type row struct {
	table int
	vals  []value
}

// unit is what one payment's events left behind: the rows to copy
// together, each copy with its own ids and times.
type unit struct {
	rows     []row
	events   int       // its inbox_events rows
	payments int       // its payments rows
	received time.Time // its first event's received_at
	last     time.Time // its latest time of any column
	txns     []int64   // the sample's ledger transaction ids, in row order
}

func scanTemplate(b []byte, unix bool) (patches []patch, ids []string) {
	for _, m := range idPattern.FindAllIndex(b, -1) {
		us := slices.Index(b[m[0]:m[1]], '_')
		patches = append(patches, patch{off: m[0] + us + 1})
		ids = append(ids, string(b[m[0]:m[1]]))
	}
	if unix {
		for _, m := range unixPattern.FindAllSubmatchIndex(b, -1) {
			t, _ := strconv.ParseInt(string(b[m[2]:m[3]]), 10, 64)
			patches = append(patches, patch{off: m[2], unix: t})
		}
		for _, m := range utcPattern.FindAllSubmatchIndex(b, -1) {
			t, err := time.Parse(utcLayout, string(b[m[2]:m[3]]))
			if err == nil {
				patches = append(patches, patch{off: m[2], unix: t.Unix(), utc: true})
			}
		}
	}
	return patches, ids
}

// render writes v for the copy stamped k with times moved by shift.
func (v value) render(k int64, shift time.Duration, txnIDs map[int64]int64) any {
	switch v.kind {
	case kindText, kindJSON, kindBytes:
		if v.bytes == nil {
			return nil
		}
		b := slices.Clone(v.bytes)
		secs := int64(shift / time.Second)
		for _, p := range v.patches {
			switch {
			case p.utc:
				copy(b[p.off:p.off+len(utcLayout)], time.Unix(p.unix+secs, 0).UTC().Format(utcLayout))
			case p.unix == 0:
				stamp(b[p.off:p.off+idStamp], k)
			default:
				copy(b[p.off:p.off+10], strconv.FormatInt(p.unix+secs, 10))
			}
		}
		switch v.kind {
		case kindText:
			return string(b)
		case kindJSON:
			return rawJSON(b)
		}
		return b
	case kindTime:
		if v.time.IsZero() {
			return nil
		}
		return v.time.Add(shift)
	case kindTxnID, kindTxnRef:
		return txnIDs[v.txnID]
	}
	return v.raw
}

// rawJSON is JSON text passed to COPY as it is.
type rawJSON []byte

func (r rawJSON) MarshalJSON() ([]byte, error) { return r, nil }

// readUnits reads every fill table of the sample database and groups its
// rows by the payment they belong to: rows that share an id (or, for the
// ledger's entries, a transaction) are one unit.
func readUnits(ctx context.Context, sample interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
	QueryRow(context.Context, string, ...any) pgx.Row
}, shapes []tableShape) ([]unit, error) {
	var all []row
	var rowIDs [][]string
	for ti, s := range shapes {
		rows, err := sample.Query(ctx, `SELECT `+s.selectList()+` FROM `+pgx.Identifier{s.name}.Sanitize())
		if err != nil {
			return nil, fmt.Errorf("read sample %s: %w", s.name, err)
		}
		for rows.Next() {
			raw, err := rows.Values()
			if err != nil {
				rows.Close()
				return nil, fmt.Errorf("read sample %s: %w", s.name, err)
			}
			r := row{table: ti, vals: make([]value, len(raw))}
			var ids []string
			for ci, c := range s.cols {
				v := value{kind: c.kind, raw: raw[ci]}
				switch c.kind {
				case kindText, kindJSON:
					if x, ok := raw[ci].(string); ok {
						v.bytes = []byte(x)
					}
				case kindBytes:
					if x, ok := raw[ci].([]byte); ok {
						v.bytes = x
					}
				case kindTime:
					if x, ok := raw[ci].(time.Time); ok {
						v.time = x
					}
				case kindTxnID, kindTxnRef:
					v.txnID = raw[ci].(int64)
					ids = append(ids, fmt.Sprintf("#txn%d", v.txnID))
				}
				if v.bytes != nil {
					var found []string
					v.patches, found = scanTemplate(v.bytes, c.kind != kindText)
					ids = append(ids, found...)
				}
				r.vals[ci] = v
			}
			if len(ids) == 0 {
				rows.Close()
				return nil, fmt.Errorf("a sample row of %s names no id: benchfill cannot tell which payment it belongs to", s.name)
			}
			all = append(all, r)
			rowIDs = append(rowIDs, ids)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("read sample %s: %w", s.name, err)
		}
	}

	// Two distinct ids that differ only in their stamped characters would
	// become one id in every copy.
	tails := map[string]string{}
	for _, ids := range rowIDs {
		for _, id := range ids {
			if id[0] == '#' {
				continue
			}
			us := slices.Index([]byte(id), '_')
			tail := id[:us+1] + id[us+1+idStamp:]
			if other, ok := tails[tail]; ok && other != id {
				return nil, fmt.Errorf("sample ids %s and %s differ only where copies are stamped", id, other)
			}
			tails[tail] = id
		}
	}

	parent := map[string]string{}
	var find func(string) string
	find = func(x string) string {
		p, ok := parent[x]
		if !ok || p == x {
			parent[x] = x
			return x
		}
		r := find(p)
		parent[x] = r
		return r
	}
	for _, ids := range rowIDs {
		for _, id := range ids[1:] {
			a, b := find(ids[0]), find(id)
			if a != b {
				parent[a] = b
			}
		}
	}
	byRoot := map[string]*unit{}
	var order []string
	for i, r := range all {
		root := find(rowIDs[i][0])
		u, ok := byRoot[root]
		if !ok {
			u = &unit{}
			byRoot[root] = u
			order = append(order, root)
		}
		u.rows = append(u.rows, r)
		for _, v := range r.vals {
			if v.kind == kindTime && v.time.After(u.last) {
				u.last = v.time
			}
			if v.kind == kindTxnID {
				u.txns = append(u.txns, v.txnID)
			}
		}
		if shapes[r.table].name == "payments" {
			u.payments++
		}
		if shapes[r.table].name == "inbox_events" {
			u.events++
			for ci, c := range shapes[r.table].cols {
				if c.name == "received_at" && (u.received.IsZero() || r.vals[ci].time.Before(u.received)) {
					u.received = r.vals[ci].time
				}
			}
		}
	}
	units := make([]unit, 0, len(order))
	for _, root := range order {
		u := byRoot[root]
		if u.events == 0 {
			return nil, fmt.Errorf("sample rows without an event (%d rows, first of %s)", len(u.rows), shapes[u.rows[0].table].name)
		}
		units = append(units, *u)
	}
	return units, nil
}

// onlyPayments keeps the payments rows of units, and the units that have
// some: copied, they are the payments table of a database filled with
// every table, its ids, references, customers, emails and times rewritten
// alike, without the rest.
func onlyPayments(units []unit, shapes []tableShape) []unit {
	var out []unit
	for _, u := range units {
		if u.payments == 0 {
			continue
		}
		kept := u
		kept.rows = nil
		kept.txns = nil
		for _, r := range u.rows {
			if shapes[r.table].name == "payments" {
				kept.rows = append(kept.rows, r)
			}
		}
		out = append(out, kept)
	}
	return out
}
