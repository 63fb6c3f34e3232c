package proccpu_test

import (
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/internal/proccpu"
)

// TestOfCountsWork: a process's CPU grows by about the work it does, and
// Matching finds it by its command line.
func TestOfCountsWork(t *testing.T) {
	before := proccpu.Of(os.Getpid())
	end := time.Now().Add(300 * time.Millisecond)
	n := 0
	for time.Now().Before(end) {
		n++
	}
	after := proccpu.Of(os.Getpid())
	require.GreaterOrEqual(t, after-before, 100*time.Millisecond, "%d loops", n)
	require.GreaterOrEqual(t, proccpu.Matching(os.Args[0]), after)
	require.Zero(t, proccpu.Of(-1))
}

// TestMachineCountsWork: the machine's busy time grows by at least the
// work this process does, and never by more than its total.
func TestMachineCountsWork(t *testing.T) {
	busy0, total0 := proccpu.Machine()
	require.Positive(t, total0)
	end := time.Now().Add(300 * time.Millisecond)
	n := 0
	for time.Now().Before(end) {
		n++
	}
	busy1, total1 := proccpu.Machine()
	require.GreaterOrEqual(t, busy1-busy0, 200*time.Millisecond, "%d loops", n)
	require.LessOrEqual(t, busy1-busy0, total1-total0)
}
