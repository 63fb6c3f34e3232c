package proccpu_test

import (
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/internal/proccpu"
)

// TestOfCountsWork: a process's CPU grows by about the work it does, and
// Matching finds it by its command line.
func TestOfCountsWork(t *testing.T) {
	before := proccpu.Of(os.Getpid())
	n := spin(t, 300*time.Millisecond)
	after := proccpu.Of(os.Getpid())
	require.GreaterOrEqual(t, after-before, 250*time.Millisecond, "%d loops", n)
	require.GreaterOrEqual(t, proccpu.Matching(os.Args[0]), after)
	require.Zero(t, proccpu.Of(-1))
}

// spin works until the kernel's own account of this process (getrusage,
// not the /proc files proccpu reads) says it used cpu more: on a shared
// machine a spell of wall time may hold much less CPU than it lasts.
func spin(t *testing.T, cpu time.Duration) int {
	t.Helper()
	used := func() time.Duration {
		var ru syscall.Rusage
		require.NoError(t, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	start, deadline := used(), time.Now().Add(time.Minute)
	n := 0
	for used()-start < cpu {
		require.True(t, time.Now().Before(deadline), "a minute without %s of CPU", cpu)
		for range 100_000 {
			n++
		}
	}
	return n
}

// TestMachineCountsWork: the machine's busy time grows by at least the
// work this process does, and never by more than its total.
func TestMachineCountsWork(t *testing.T) {
	busy0, total0 := proccpu.Machine()
	require.Positive(t, total0)
	n := spin(t, 300*time.Millisecond)
	busy1, total1 := proccpu.Machine()
	require.GreaterOrEqual(t, busy1-busy0, 250*time.Millisecond, "%d loops", n)
	require.LessOrEqual(t, busy1-busy0, total1-total0)
}
