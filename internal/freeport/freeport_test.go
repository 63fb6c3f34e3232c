package freeport

import "testing"

// TestNeverTheSamePortTwice: ports handed out in one process are distinct
// even when each is released before the next is asked for, which is how a
// listen on port 0 and close can repeat one.
func TestNeverTheSamePortTwice(t *testing.T) {
	seen := map[int]bool{}
	for range 2000 {
		port := MustPort(t)
		if seen[port] {
			t.Fatalf("port %d handed out twice", port)
		}
		seen[port] = true
		if port >= ephemeralLow() && ephemeralLow() > floor+1000 {
			t.Fatalf("port %d is in the ephemeral range", port)
		}
	}
}
