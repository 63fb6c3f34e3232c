// Package outbuf collects the output of a child process (paygate, mailpit,
// stripe-mock) that tests start, so they can read it while the process
// still writes. It must never be imported by production code.
package outbuf

import (
	"bytes"
	"sync"
)

// Buffer is an io.Writer safe for concurrent writes and reads.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write implements io.Writer.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
