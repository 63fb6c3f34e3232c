package jobs

import (
	"sync"
)

// paymentClaims are the payments the appliers of this process are applying
// now, each claimed by one open transaction. Two batches applied at once
// often hold events of the same payment (its charge and its intent arrive
// in different ingest batches); the second would wait in the database for
// the first's payment lock, idle, until the first commits. Instead, a
// batch leaves out the events of a payment another batch holds (deferred),
// commits the rest, and applies those once the other has let the payment
// go. Other processes still meet in the database's locks.
type paymentClaims struct {
	mu   sync.Mutex
	held map[string]chan struct{} // closed when released
}

// claimSet is what one transaction claimed, and the claims it found taken.
type claimSet struct {
	claims *paymentClaims
	mine   map[string]bool
	busy   map[string]chan struct{}
}

func (c *paymentClaims) begin() *claimSet {
	return &claimSet{claims: c, mine: map[string]bool{}, busy: map[string]chan struct{}{}}
}

// take claims payment for s's transaction; when another holds it, it
// answers false and the channel closed when that one lets it go.
func (s *claimSet) take(payment string) (bool, chan struct{}) {
	if s.mine[payment] {
		return true, nil
	}
	if ch, ok := s.busy[payment]; ok {
		return false, ch
	}
	c := s.claims
	c.mu.Lock()
	defer c.mu.Unlock()
	if ch, ok := c.held[payment]; ok {
		s.busy[payment] = ch
		return false, ch
	}
	if c.held == nil {
		c.held = map[string]chan struct{}{}
	}
	c.held[payment] = make(chan struct{})
	s.mine[payment] = true
	return true, nil
}

// release lets go of s's claims, once its transaction has ended.
func (s *claimSet) release() {
	c := s.claims
	c.mu.Lock()
	defer c.mu.Unlock()
	for p := range s.mine {
		close(c.held[p])
		delete(c.held, p)
	}
	s.mine = map[string]bool{}
}
