package testdb

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// BackendCPU is the CPU time spent so far by the server processes serving
// pool's database, read from /proc (the server runs on this machine in
// tests): benchmarks report what a piece of work cost the database in CPU
// rather than in time, which another tenant's load moves much less. The
// processes' titles are "postgres: <user> <database> …"; one that exited
// (a connection closed) is no longer counted, so a benchmark keeps its
// pool's connections open across its measure.
func BackendCPU(pool *pgxpool.Pool) time.Duration {
	database := " " + pool.Config().ConnConfig.Database + " "
	paths, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	var ticks int64
	for _, p := range paths {
		cmd, err := os.ReadFile(p)
		if err != nil || !strings.Contains(string(cmd), database) {
			continue
		}
		stat, err := os.ReadFile(filepath.Join(filepath.Dir(p), "stat"))
		if err != nil {
			continue
		}
		// The fields after the command's closing parenthesis: utime and
		// stime are the 12th and 13th.
		f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		if len(f) < 13 {
			continue
		}
		u, _ := strconv.ParseInt(f[11], 10, 64)
		s, _ := strconv.ParseInt(f[12], 10, 64)
		ticks += u + s
	}
	const userHZ = 100 // Linux's clock ticks per second for /proc
	return time.Duration(ticks) * time.Second / userHZ
}

// ProcessCPU is the CPU time this process has spent so far, user and
// system: a benchmark's Go side, to set beside BackendCPU.
func ProcessCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
