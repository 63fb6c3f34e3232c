package demo

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ReceiverPath is where the world serves the merchant's endpoint that
// paygate delivers its messages to.
const ReceiverPath = "/receiver"

// receiverTolerance is how far a message's timestamp may be from the
// receiver's clock, as the Standard Webhooks libraries allow.
const receiverTolerance = 5 * time.Minute

// Receiver is the merchant's endpoint of the demo: it verifies each
// message's Standard Webhooks signature with the endpoint's secrets, as a
// merchant's system would, and counts what it received. Messages are
// deduplicated on their id, as the README asks consumers to.
type Receiver struct {
	mu       sync.Mutex
	now      func() time.Time
	secrets  map[string][]byte // by the secret as paygate shows it
	seen     map[string]bool   // message ids
	byType   map[string]int
	requests int // verified requests, redeliveries included
	rejected int
}

// ReceiverStats is what the receiver has received.
type ReceiverStats struct {
	// Messages counts distinct messages verified, ByType them per type.
	Messages int            `json:"messages"`
	ByType   map[string]int `json:"by_type"`
	// Deliveries counts verified requests, a message sent again included.
	Deliveries int `json:"deliveries"`
	// Rejected counts requests whose signature did not verify.
	Rejected int `json:"rejected"`
	// Ready is true once the receiver has a secret to verify with.
	Ready bool `json:"ready"`
}

func newReceiver(now func() time.Time) *Receiver {
	return &Receiver{now: now, secrets: map[string][]byte{}, seen: map[string]bool{}, byType: map[string]int{}}
}

// errSecret is a secret that is not a Standard Webhooks whsec_ secret.
var errSecret = errors.New("not a whsec_ secret of base64")

// AddSecret adds a secret the receiver verifies with, reporting whether
// it is new; the ones it had stay, so that a rotation's two secrets both
// verify. It fails with errSecret.
func (rc *Receiver) AddSecret(secret string) (bool, error) {
	key, err := decodeSecret(secret)
	if err != nil {
		return false, err
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if _, ok := rc.secrets[secret]; ok {
		return false, nil
	}
	rc.secrets[secret] = key
	return true, nil
}

func decodeSecret(secret string) ([]byte, error) {
	enc, ok := strings.CutPrefix(secret, "whsec_")
	if !ok {
		return nil, errSecret
	}
	key, err := base64.StdEncoding.DecodeString(enc)
	if err != nil || len(key) == 0 {
		return nil, errSecret
	}
	return key, nil
}

// Stats is what the receiver has received so far.
func (rc *Receiver) Stats() ReceiverStats {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return ReceiverStats{Messages: len(rc.seen), ByType: maps.Clone(rc.byType), Deliveries: rc.requests,
		Rejected: rc.rejected, Ready: len(rc.secrets) > 0}
}

// ServeHTTP takes one delivery: 204 once verified; 401 when the signature
// or its timestamp is wrong; 503 with Retry-After while no secret is set,
// so that paygate tries again shortly.
func (rc *Receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "POST a message", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		http.Error(w, "read the body", http.StatusBadRequest)
		return
	}
	id, ts, sig := r.Header.Get("webhook-id"), r.Header.Get("webhook-timestamp"), r.Header.Get("webhook-signature")
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if len(rc.secrets) == 0 {
		w.Header().Set("Retry-After", "5")
		http.Error(w, "no endpoint secret yet: `paygate demo` sets it", http.StatusServiceUnavailable)
		return
	}
	if !rc.verifiedLocked(id, ts, sig, body) {
		rc.rejected++
		http.Error(w, "signature does not verify", http.StatusUnauthorized)
		return
	}
	var msg struct {
		ID   string `json:"id"`
		Type string `json:"type"`
	}
	if err := json.Unmarshal(body, &msg); err != nil || msg.ID != id {
		rc.rejected++
		http.Error(w, "not a paygate message", http.StatusBadRequest)
		return
	}
	rc.requests++
	if !rc.seen[msg.ID] {
		rc.seen[msg.ID] = true
		rc.byType[msg.Type]++
	}
	w.WriteHeader(http.StatusNoContent)
}

// verifiedLocked checks the Standard Webhooks signature: one of the
// space-separated "v1,<base64>" entries is the HMAC-SHA256 of
// "<id>.<timestamp>.<body>" under one of the secrets, and the timestamp is
// within the tolerance.
func (rc *Receiver) verifiedLocked(id, ts, sig string, body []byte) bool {
	unix, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || id == "" {
		return false
	}
	if d := rc.now().Sub(time.Unix(unix, 0)); d > receiverTolerance || d < -receiverTolerance {
		return false
	}
	for _, key := range rc.secrets {
		m := hmac.New(sha256.New, key)
		m.Write([]byte(id + "." + ts + "."))
		m.Write(body)
		want := m.Sum(nil)
		for _, entry := range strings.Fields(sig) {
			b64, ok := strings.CutPrefix(entry, "v1,")
			if !ok {
				continue
			}
			if got, err := base64.StdEncoding.DecodeString(b64); err == nil && hmac.Equal(got, want) {
				return true
			}
		}
	}
	return false
}
