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

// Machine is the time every CPU of the machine has spent so far (total)
// and the part of it spent working (busy: all but idle and waiting on I/O),
// from /proc/stat; zero when it cannot be read. Between two readings,
// busy's share of total is how much of the machine was at work; the rest
// is what a piece of work left unused, waiting on something (a flush, a
// timer, a lock) instead of computing.
func Machine() (busy, total time.Duration) {
	stat, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(stat), "\n")
	return machineOf(line)
}

// machineOf reads /proc/stat's first line: "cpu" and the ticks of user,
// nice, system, idle, iowait, irq, softirq and steal, then guest and
// guest_nice, which user and nice already count.
func machineOf(line string) (busy, total time.Duration) {
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0, 0
	}
	var ticks [8]int64
	for i := range ticks {
		n, err := strconv.ParseInt(f[1+i], 10, 64)
		if err != nil {
			return 0, 0
		}
		ticks[i] = n
	}
	var all int64
	for _, n := range ticks {
		all += n
	}
	idle := ticks[3] + ticks[4]
	return time.Duration(all-idle) * time.Second / userHZ, time.Duration(all) * time.Second / userHZ
}
