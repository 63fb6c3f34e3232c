package proccpu

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestMachineOf: busy is every tick but idle and I/O wait; guest time,
// already in user, is not counted twice; a line not /proc/stat's reads as
// nothing.
func TestMachineOf(t *testing.T) {
	busy, total := machineOf("cpu  100 5 50 800 40 3 2 0 30 0")
	require.Equal(t, 1600*time.Millisecond, busy) // 100+5+50+3+2+0 ticks
	require.Equal(t, 10*time.Second, total)       // with 800 idle and 40 waiting
	for _, bad := range []string{"", "cpu0 1 2 3 4 5 6 7 8", "cpu 1 2 3", "cpu 1 2 x 4 5 6 7 8"} {
		busy, total := machineOf(bad)
		require.Zero(t, busy, bad)
		require.Zero(t, total, bad)
	}
}
