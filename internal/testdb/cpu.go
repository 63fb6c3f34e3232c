package testdb

import (
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paygate/paygate/internal/proccpu"
)

// BackendCPU is the CPU time spent so far by the server processes serving
// pool's database, read from /proc (the server runs on this machine in
// tests): benchmarks report what a piece of work cost the database in CPU
// rather than in time, which another tenant's load moves much less. The
// processes' titles are "postgres: <user> <database> …"; one that exited
// (a connection closed) is no longer counted, so a benchmark keeps its
// pool's connections open across its measure.
func BackendCPU(pool *pgxpool.Pool) time.Duration {
	return proccpu.Matching(" " + pool.Config().ConnConfig.Database + " ")
}

// ProcessCPU is the CPU time this process has spent so far, user and
// system: a benchmark's Go side, to set beside BackendCPU.
func ProcessCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
