package reconcile

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ErrBadCursor is returned for a cursor this package did not hand out.
var ErrBadCursor = errors.New("invalid cursor")

// DefaultLimit and MaxLimit bound a page of ListRuns and ItemsPage.
const (
	DefaultLimit = 50
	MaxLimit     = 500
)

func pageLimit(limit int) int {
	switch {
	case limit <= 0:
		return DefaultLimit
	case limit > MaxLimit:
		return MaxLimit
	}
	return limit
}

// Cursors are a run's id (runs) or an item's position (items) with a
// prefix that tells them apart, so that one is never taken for the other.
func encodeCursor(prefix string, n int64) string {
	return base64.RawURLEncoding.EncodeToString(fmt.Appendf(nil, "%s:%d", prefix, n))
}

func decodeCursor(prefix, s string) (int64, error) {
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return 0, ErrBadCursor
	}
	p, v, ok := strings.Cut(string(raw), ":")
	if !ok || p != prefix {
		return 0, ErrBadCursor
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, ErrBadCursor
	}
	return n, nil
}

// RunFilter selects runs. The zero value selects every run.
type RunFilter struct {
	Provider string    // one provider's runs; empty: every provider's
	Date     time.Time // the runs of a UTC day; zero: every day and batch
	Batch    int64     // the runs of a settlement batch; zero: every batch and day
}

// ListRuns returns the runs f selects, newest first (by id: runs are
// numbered as they are requested), limit at a time (DefaultLimit when zero,
// at most MaxLimit) after cursor (the first page when empty). next is the
// cursor of the following page, empty at the end.
//
// It fails with ErrBadCursor.
func ListRuns(ctx context.Context, q Querier, f RunFilter, cursor string, limit int) (runs []Run, next string, err error) {
	conds, args := []string{"true"}, []any{}
	if f.Provider != "" {
		args = append(args, f.Provider)
		conds = append(conds, fmt.Sprintf("provider = $%d", len(args)))
	}
	if !f.Date.IsZero() {
		args = append(args, f.Date.Format(DateLayout))
		conds = append(conds, fmt.Sprintf("date = $%d", len(args)))
	}
	if f.Batch != 0 {
		args = append(args, f.Batch)
		conds = append(conds, fmt.Sprintf("batch = $%d", len(args)))
	}
	if cursor != "" {
		id, err := decodeCursor("r1", cursor)
		if err != nil {
			return nil, "", err
		}
		args = append(args, id)
		conds = append(conds, fmt.Sprintf("id < $%d", len(args)))
	}
	limit = pageLimit(limit)
	args = append(args, limit+1)
	rows, err := q.Query(ctx, `SELECT `+runColumns+` FROM reconciliation_runs WHERE `+strings.Join(conds, " AND ")+
		fmt.Sprintf(` ORDER BY id DESC LIMIT $%d`, len(args)), args...)
	if err != nil {
		return nil, "", fmt.Errorf("list reconciliation runs: %w", err)
	}
	defer rows.Close()
	runs = []Run{}
	for rows.Next() {
		r, err := scanRun(rows)
		if err != nil {
			return nil, "", fmt.Errorf("list reconciliation runs: %w", err)
		}
		runs = append(runs, r)
	}
	if err := rows.Err(); err != nil {
		return nil, "", fmt.Errorf("list reconciliation runs: %w", err)
	}
	if len(runs) > limit {
		runs = runs[:limit]
		next = encodeCursor("r1", runs[limit-1].ID)
	}
	return runs, next, nil
}

// ErrUnknownStatus is returned for an item filter naming no item status;
// ErrUnknownState for one naming no item state.
var (
	ErrUnknownStatus = errors.New("unknown item status")
	ErrUnknownState  = errors.New("unknown item state")
)

// ItemState is where an exception stands: open until finance resolves it.
type ItemState string

// The item states. Items that are not exceptions (matched, fee_posted)
// are in neither.
const (
	ItemOpen     ItemState = "open"
	ItemResolved ItemState = "resolved"
)

// ItemStates lists the item states.
var ItemStates = []ItemState{ItemOpen, ItemResolved}

// ItemFilter selects a run's items. The zero value selects every item.
type ItemFilter struct {
	Status Status    // one item status; empty: every status
	State  ItemState // the open or the resolved exceptions; empty: every item
}

// ItemsPage returns a run's items that f selects, in report order, limit
// at a time (DefaultLimit when zero, at most MaxLimit) after cursor (the
// first page when empty). next is the cursor of the following page, empty
// at the end. The items of a finished run never change, so the pages of
// one run always add up to its items; a page of open exceptions may lose
// one to a resolution made meanwhile, never repeat one.
//
// It fails with ErrBadCursor, ErrUnknownStatus or ErrUnknownState.
func ItemsPage(ctx context.Context, q Querier, runID int64, f ItemFilter, cursor string, limit int) (page []Item, next string, err error) {
	if f.Status != "" && !slices.Contains(Statuses, f.Status) {
		return nil, "", fmt.Errorf("%w: %q", ErrUnknownStatus, f.Status)
	}
	if f.State != "" && !slices.Contains(ItemStates, f.State) {
		return nil, "", fmt.Errorf("%w: %q", ErrUnknownState, f.State)
	}
	after := int64(-1)
	if cursor != "" {
		if after, err = decodeCursor("i1", cursor); err != nil {
			return nil, "", err
		}
	}
	limit = pageLimit(limit)
	page, positions, err := items(ctx, q, runID, f, int(after), limit+1)
	if err != nil {
		return nil, "", err
	}
	if len(page) > limit {
		page = page[:limit]
		next = encodeCursor("i1", int64(positions[limit-1]))
	}
	return page, next, nil
}

// EachItem calls fn with each of a run's items in report order, reading
// them MaxLimit at a time, so that a run of any size is walked in bounded
// memory. An error from fn stops the walk and is returned.
func EachItem(ctx context.Context, q Querier, runID int64, fn func(Item) error) error {
	for after := -1; ; {
		page, positions, err := items(ctx, q, runID, ItemFilter{}, after, MaxLimit)
		if err != nil {
			return err
		}
		for _, it := range page {
			if err := fn(it); err != nil {
				return err
			}
		}
		if len(page) < MaxLimit {
			return nil
		}
		after = positions[len(positions)-1]
	}
}
