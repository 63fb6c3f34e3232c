package ledger

import (
	"context"
	"fmt"
	"slices"
)

// PaymentReferences maps each of ids that is a payment with a known order
// reference to that reference; a payment without one, and an id of no
// payment, are absent. One statement, whatever the number of ids.
func PaymentReferences(ctx context.Context, q Querier, ids []string) (map[string]string, error) {
	out := map[string]string{}
	ids = slices.DeleteFunc(slices.Compact(slices.Sorted(slices.Values(ids))), func(id string) bool { return id == "" })
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := q.Query(ctx, `SELECT id, reference FROM payments WHERE id = ANY($1::text[]) AND reference IS NOT NULL`, ids)
	if err != nil {
		return nil, fmt.Errorf("references of %d payments: %w", len(ids), err)
	}
	defer rows.Close()
	for rows.Next() {
		var id, reference string
		if err := rows.Scan(&id, &reference); err != nil {
			return nil, fmt.Errorf("references of %d payments: %w", len(ids), err)
		}
		out[id] = reference
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("references of %d payments: %w", len(ids), err)
	}
	return out, nil
}
