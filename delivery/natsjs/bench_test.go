package natsjs_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/paygate/paygate/outbox"
)

// BenchmarkPublish measures the publish rate: 20,000 messages of 2,000
// payments (ten each, written as applying writes them, interleaved), then
// published from the relay's place to the end, with the default batch, to
// the embedded nats-server's file store.
//
//	go test -run '^$' -bench Publish -benchtime 3x ./delivery/natsjs/
func BenchmarkPublish(b *testing.B) {
	const payments, each = 2000, 10
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		bundle := setup(b)
		p := bundle.publisher(b)
		var msgs []outbox.Message
		for s := 1; s <= each; s++ {
			for o := range payments {
				msgs = append(msgs, message(b, fmt.Sprintf("pi_bench_%d_%d", i, o), int64(s), "payment.succeeded"))
			}
		}
		for j := 0; j < len(msgs); j += 500 {
			if err := pgx.BeginFunc(b.Context(), bundle.pool, func(tx pgx.Tx) error {
				return outbox.WriteTx(b.Context(), tx, msgs[j:min(j+500, len(msgs))])
			}); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := outbox.Sequence(b.Context(), bundle.pool, 100_000); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		start := time.Now()
		var n int
		for n < len(msgs) {
			res, err := p.Publish(b.Context(), bundle.river)
			if err != nil {
				b.Fatal(err)
			}
			n += res.Messages
		}
		b.ReportMetric(float64(n)/time.Since(start).Seconds(), "msgs/s")
	}
}
