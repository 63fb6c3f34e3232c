// Package freeport hands out loopback ports for the servers tests start in
// other processes (paygate, mailpit, stripe-mock, PostgreSQL), which must
// be told a port before they bind it.
//
// A port probed with a listen on port 0 and closed again can be handed to
// the next such probe: two servers of one test were once given the same
// port, and the one that bound second failed. So ports come from below the
// kernel's ephemeral range, at random, and never twice in one process.
// Below that range no outgoing connection takes one as its source port
// either, which matters when a server is restarted on its port after a
// kill.
package freeport

import (
	"fmt"
	mrand "math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// floor is the lowest port handed out: well-known and registered services
// sit below it.
const floor = 10000

var (
	mu     sync.Mutex
	handed = map[int]bool{}
)

// Port returns a loopback TCP port that nothing listens on right now and
// that this process has not handed out before.
func Port() (int, error) {
	mu.Lock()
	defer mu.Unlock()
	if low := ephemeralLow(); low > floor+1000 {
		for range 500 {
			port := floor + mrand.IntN(low-floor)
			if !handed[port] && free(port) {
				handed[port] = true
				return port, nil
			}
		}
	}
	for range 100 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		if !handed[port] {
			handed[port] = true
			return port, nil
		}
	}
	return 0, fmt.Errorf("freeport: no loopback port left that was not handed out already")
}

// Addr is Port as "127.0.0.1:port", failing t when there is none.
func Addr(t testing.TB) string {
	t.Helper()
	return fmt.Sprintf("127.0.0.1:%d", MustPort(t))
}

// MustPort is Port, failing t when there is none.
func MustPort(t testing.TB) int {
	t.Helper()
	port, err := Port()
	if err != nil {
		t.Fatal(err)
	}
	return port
}

func free(port int) bool {
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		return false
	}
	ln.Close()
	return true
}

// ephemeralLow is the first port of the kernel's ephemeral range.
func ephemeralLow() int {
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				low = n
			}
		}
	}
	return low
}
