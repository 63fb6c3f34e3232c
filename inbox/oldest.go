package inbox

import (
	"context"
	"fmt"
	"time"
)

// OldestReceived is how long the oldest event still received (acknowledged
// and not yet applied: waiting for its job, or failing and retried) has
// waited; zero when none waits. It reads inbox_events_status_idx from its
// received end, so it costs the same at any size of the inbox.
func OldestReceived(ctx context.Context, q Querier) (time.Duration, error) {
	var seconds float64
	err := q.QueryRow(ctx, `SELECT coalesce(extract(epoch FROM now() - min(received_at)), 0)::float8
		FROM inbox_events WHERE status = $1`, string(StatusReceived)).Scan(&seconds)
	if err != nil {
		return 0, fmt.Errorf("age of the oldest received event: %w", err)
	}
	return time.Duration(seconds * float64(time.Second)), nil
}
