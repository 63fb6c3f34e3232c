// Package proccpu reads from /proc the CPU time processes of this machine
// have spent. Benchmarks report what a piece of work cost in CPU rather
// than in time, which another tenant's load on a shared machine moves much
// more.
package proccpu

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// userHZ is Linux's clock ticks per second in /proc.
const userHZ = 100

// Of is the CPU time, user and system, process pid has spent so far; 0
// when it is gone.
func Of(pid int) time.Duration {
	return ofStat(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
}

// Matching is the CPU time spent so far by the processes whose command
// line (a PostgreSQL process's title: "postgres: <user> <database> …")
// contains substr. A process that exited is no longer counted: a caller
// keeps the connections it measures open across its measure.
func Matching(substr string) time.Duration {
	paths, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	var total time.Duration
	for _, p := range paths {
		cmd, err := os.ReadFile(p)
		if err != nil || !strings.Contains(string(cmd), substr) {
			continue
		}
		total += ofStat(filepath.Join(filepath.Dir(p), "stat"))
	}
	return total
}

func ofStat(path string) time.Duration {
	stat, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	// The fields after the command's closing parenthesis (the command may
	// hold spaces and parentheses): utime and stime are the 12th and 13th.
	f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	s, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+s) * time.Second / userHZ
}
