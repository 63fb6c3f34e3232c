package demo

import (
	"bufio"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"
)

// journalVersion names the scripts a journal was written with: a journal
// of another version would replay into other ids, so it is set aside and
// the world starts afresh. Raise it whenever a day's script changes.
const journalVersion = 2

// journalHeader is a journal's first line: what the simulators were made
// from.
type journalHeader struct {
	Version    int   `json:"version"`
	StripeSeed int64 `json:"stripe_seed"`
	AdyenSeed  int64 `json:"adyen_seed"`
}

// The changes a journal records.
const (
	opDay            = "day"             // a day played
	opStripeRefund   = "stripe_refund"   // a refund made through POST /v1/refunds
	opAdyenRefund    = "adyen_refund"    // a refund taken by the Checkout API
	opAdyenOutcome   = "adyen_outcome"   // a Checkout refund settled
	opReceiverSecret = "receiver_secret" // a secret given to the receiver
)

// entry is one change of the world. The simulators are deterministic given
// their seed and the calls made on them, so replaying the entries in order
// rebuilds every object with the same id.
type entry struct {
	Op   string    `json:"op"`
	At   time.Time `json:"at,omitzero"`
	Date string    `json:"date,omitempty"`
	// A request as the provider's API received it.
	Path   string `json:"path,omitempty"`
	Key    string `json:"key,omitempty"`
	Body   string `json:"body,omitempty"`
	Refund string `json:"refund,omitempty"`
	Secret string `json:"secret,omitempty"`
}

// journal appends the world's changes to a file, so that a restarted world
// (make run stopped and started again) still holds the payments paygate
// recorded, answers their refunds and lists their balance transactions.
// A nil *journal records nothing.
type journal struct {
	f *os.File
}

// openJournal opens path, creating it with fresh seeds when it does not
// exist. A journal of another version is renamed path+".old" and replaced.
// It returns the header and the entries to replay.
func openJournal(path string) (*journal, journalHeader, []entry, error) {
	h, entries, err := readJournal(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return nil, h, nil, err
	case h.Version != journalVersion:
		if err := os.Rename(path, path+".old"); err != nil {
			return nil, h, nil, fmt.Errorf("set aside the journal of version %d: %w", h.Version, err)
		}
	default:
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return nil, h, nil, fmt.Errorf("open the journal: %w", err)
		}
		return &journal{f: f}, h, entries, nil
	}
	h = journalHeader{Version: journalVersion, StripeSeed: randomSeed(), AdyenSeed: randomSeed()}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|os.O_APPEND, 0o600)
	if err != nil {
		return nil, h, nil, fmt.Errorf("create the journal: %w", err)
	}
	j := &journal{f: f}
	if err := j.write(h); err != nil {
		f.Close()
		return nil, h, nil, err
	}
	return j, h, nil, nil
}

func readJournal(path string) (journalHeader, []entry, error) {
	var h journalHeader
	f, err := os.Open(path)
	if err != nil {
		return h, nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	if !sc.Scan() {
		// An empty file: nothing was ever written after the header failed.
		return h, nil, sc.Err()
	}
	if err := json.Unmarshal(sc.Bytes(), &h); err != nil {
		return h, nil, fmt.Errorf("read the journal %s: its first line: %w", path, err)
	}
	var entries []entry
	for sc.Scan() {
		var e entry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			// A line cut short by a crash is the last one: what it
			// recorded never finished.
			break
		}
		entries = append(entries, e)
	}
	return h, entries, sc.Err()
}

// record appends e.
func (j *journal) record(e entry) error {
	if j == nil {
		return nil
	}
	return j.write(e)
}

func (j *journal) write(v any) error {
	line, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode a journal entry: %w", err)
	}
	if _, err := j.f.Write(append(line, '\n')); err != nil {
		return fmt.Errorf("write the journal: %w", err)
	}
	return nil
}

func (j *journal) close() error {
	if j == nil {
		return nil
	}
	return j.f.Close()
}

func randomSeed() int64 {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return int64(binary.LittleEndian.Uint64(b[:])>>1) | 1
}
