package delivery

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paygate/paygate/outbox"
)

// Querier is what reads need: a pool, a connection or a transaction.
type Querier = outbox.Querier

// Status is whether an endpoint is sent messages.
type Status string

// The statuses of an endpoint.
const (
	StatusEnabled  Status = "enabled"
	StatusDisabled Status = "disabled"
)

// AllTypes subscribes an endpoint to every message type.
const AllTypes = "*"

// SecretOverlap is how long a rotated-out secret keeps signing beside the
// new one, so a receiver can switch without losing a message (Svix's
// default grace period).
const SecretOverlap = 24 * time.Hour

var (
	// ErrEndpointNotFound is returned for an endpoint id no endpoint has.
	ErrEndpointNotFound = errors.New("endpoint not found")
	// ErrInvalidEndpoint is returned for an endpoint that is not well
	// formed: no event types, an unknown one, a description too long, an
	// unknown status.
	ErrInvalidEndpoint = errors.New("invalid endpoint")
)

// maxDescription bounds an endpoint's free text.
const maxDescription = 500

// Endpoint is one URL of the merchant's that messages are sent to.
type Endpoint struct {
	ID          string
	URL         string
	EventTypes  []string
	Description string
	Status      Status
	// DisabledReason says why a disabled endpoint is: an operator, a 410,
	// or failing for too long.
	DisabledReason string
	// Secret signs every request; never shown but at creation and by the
	// secret route, never logged.
	Secret              string
	PreviousSecret      string
	PreviousSecretUntil *time.Time
	FailingSince        *time.Time
	LastSuccessAt       *time.Time
	LastFailureAt       *time.Time
	CreatedAt           time.Time
	UpdatedAt           time.Time
}

// SigningSecrets are the secrets a request is signed with at now: the
// current one, and the previous one during its overlap.
func (e Endpoint) SigningSecrets(now time.Time) []string {
	secrets := []string{e.Secret}
	if e.PreviousSecret != "" && e.PreviousSecretUntil != nil && now.Before(*e.PreviousSecretUntil) {
		secrets = append(secrets, e.PreviousSecret)
	}
	return secrets
}

// Accepts reports whether the endpoint is subscribed to messages of typ.
func (e Endpoint) Accepts(typ string) bool {
	return slices.Contains(e.EventTypes, AllTypes) || slices.Contains(e.EventTypes, typ)
}

const endpointColumns = `id, url, event_types, description, status, coalesce(disabled_reason, ''), secret,
	coalesce(previous_secret, ''), previous_secret_until, failing_since, last_success_at, last_failure_at,
	created_at, updated_at`

func scanEndpoint(row pgx.Row) (Endpoint, error) {
	var e Endpoint
	err := row.Scan(&e.ID, &e.URL, &e.EventTypes, &e.Description, &e.Status, &e.DisabledReason, &e.Secret,
		&e.PreviousSecret, &e.PreviousSecretUntil, &e.FailingSince, &e.LastSuccessAt, &e.LastFailureAt,
		&e.CreatedAt, &e.UpdatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return Endpoint{}, ErrEndpointNotFound
	}
	return e, err
}

// Store keeps the endpoints and their deliveries.
type Store struct {
	pool  *pgxpool.Pool
	guard GuardConfig
}

// NewStore returns the store of pool's endpoints; guard decides which URLs
// an endpoint may have.
func NewStore(pool *pgxpool.Pool, guard GuardConfig) *Store {
	return &Store{pool: pool, guard: guard}
}

// NewEndpoint is what an operator registers.
type NewEndpoint struct {
	URL         string
	EventTypes  []string
	Description string
}

// checkTypes validates a subscription: a non-empty list of known types, or
// the wildcard alone.
func checkTypes(types []string) ([]string, error) {
	if len(types) == 0 {
		return nil, fmt.Errorf("%w: event_types must list at least one message type, or \"*\"", ErrInvalidEndpoint)
	}
	known := outbox.Types()
	var out []string
	for _, t := range types {
		if t != AllTypes && !slices.Contains(known, t) {
			return nil, fmt.Errorf("%w: unknown message type %q (one of %s, or \"*\")", ErrInvalidEndpoint, t, strings.Join(known, ", "))
		}
		if !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	if slices.Contains(out, AllTypes) {
		out = []string{AllTypes}
	}
	return out, nil
}

func checkDescription(d string) (string, error) {
	d = strings.TrimSpace(d)
	if len([]rune(d)) > maxDescription {
		return "", fmt.Errorf("%w: description is longer than %d characters", ErrInvalidEndpoint, maxDescription)
	}
	return d, nil
}

// newEndpointID is "ep_" and 24 random characters of the message ids'
// alphabet.
func newEndpointID() string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz234567"
	b := make([]byte, 24)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return "ep_" + string(b)
}

// Create registers an endpoint, enabled, with a new secret.
//
// It fails with ErrInvalidEndpoint, ErrInvalidURL or ErrForbiddenURL.
func (s *Store) Create(ctx context.Context, n NewEndpoint) (Endpoint, error) {
	types, err := checkTypes(n.EventTypes)
	if err != nil {
		return Endpoint{}, err
	}
	desc, err := checkDescription(n.Description)
	if err != nil {
		return Endpoint{}, err
	}
	if err := CheckURL(ctx, n.URL, s.guard); err != nil {
		return Endpoint{}, err
	}
	secret, err := NewSecret()
	if err != nil {
		return Endpoint{}, err
	}
	// An endpoint gets the messages created from its creation on. Its place
	// starts at the end of the feed, or before the first message placed
	// already that is as new as it (one created by a transaction that began
	// after this one and was placed meanwhile).
	e, err := scanEndpoint(s.pool.QueryRow(ctx, `
		INSERT INTO endpoints (id, url, event_types, description, secret, handed_through)
		VALUES ($1, $2, $3, $4, $5, least(
			(SELECT last_position FROM message_sequencer),
			(SELECT min(position) - 1 FROM messages WHERE position IS NOT NULL AND created_at >= now())))
		RETURNING `+endpointColumns, newEndpointID(), n.URL, types, desc, secret))
	if err != nil {
		return Endpoint{}, fmt.Errorf("create endpoint: %w", err)
	}
	return e, nil
}

// GetEndpoint returns one endpoint.
//
// It fails with ErrEndpointNotFound.
func GetEndpoint(ctx context.Context, q Querier, id string) (Endpoint, error) {
	e, err := scanEndpoint(q.QueryRow(ctx, `SELECT `+endpointColumns+` FROM endpoints WHERE id = $1`, id))
	if err != nil && !errors.Is(err, ErrEndpointNotFound) {
		return Endpoint{}, fmt.Errorf("get endpoint %s: %w", id, err)
	}
	return e, err
}

// ErrInvalidCursor is returned for a list cursor this package did not hand
// out.
var ErrInvalidCursor = errors.New("invalid cursor")

// ListEndpoints returns up to limit endpoints, oldest first, after cursor
// (an endpoint id; "" from the start), and the cursor of the next page
// ("" at the end).
func ListEndpoints(ctx context.Context, q Querier, cursor string, limit int) ([]Endpoint, string, error) {
	rows, err := q.Query(ctx, `SELECT `+endpointColumns+` FROM endpoints
		WHERE $1 = '' OR (created_at, id) > (SELECT created_at, id FROM endpoints WHERE id = $1)
		ORDER BY created_at, id LIMIT $2`, cursor, limit+1)
	if err != nil {
		return nil, "", fmt.Errorf("list endpoints: %w", err)
	}
	eps, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Endpoint, error) { return scanEndpoint(row) })
	if err != nil {
		return nil, "", fmt.Errorf("list endpoints: %w", err)
	}
	if cursor != "" && len(eps) == 0 {
		if _, err := GetEndpoint(ctx, q, cursor); errors.Is(err, ErrEndpointNotFound) {
			return nil, "", fmt.Errorf("%w: %q", ErrInvalidCursor, cursor)
		}
	}
	next := ""
	if len(eps) > limit {
		eps, next = eps[:limit], eps[limit-1].ID
	}
	return eps, next, nil
}

// Patch is an edit of an endpoint; nil fields are left as they are.
type Patch struct {
	URL         *string
	EventTypes  *[]string
	Description *string
	Status      *Status
}

// Update edits endpoint id. Enabling a disabled endpoint resumes its
// queue: the messages kept while it was disabled go first, each on a
// fresh retry schedule; disabling holds them.
//
// It fails with ErrEndpointNotFound, ErrInvalidEndpoint, ErrInvalidURL or
// ErrForbiddenURL.
func (s *Store) Update(ctx context.Context, id string, p Patch) (Endpoint, error) {
	if p.URL != nil {
		if err := CheckURL(ctx, *p.URL, s.guard); err != nil {
			return Endpoint{}, err
		}
	}
	var types []string
	if p.EventTypes != nil {
		var err error
		if types, err = checkTypes(*p.EventTypes); err != nil {
			return Endpoint{}, err
		}
	}
	var desc *string
	if p.Description != nil {
		d, err := checkDescription(*p.Description)
		if err != nil {
			return Endpoint{}, err
		}
		desc = &d
	}
	if p.Status != nil && *p.Status != StatusEnabled && *p.Status != StatusDisabled {
		return Endpoint{}, fmt.Errorf("%w: status must be enabled or disabled", ErrInvalidEndpoint)
	}
	var e Endpoint
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		before, err := scanEndpoint(tx.QueryRow(ctx, `SELECT `+endpointColumns+` FROM endpoints WHERE id = $1 FOR UPDATE`, id))
		if err != nil {
			return err
		}
		status, reason := before.Status, before.DisabledReason
		if p.Status != nil && *p.Status != before.Status {
			status, reason = *p.Status, ""
			if status == StatusDisabled {
				reason = "disabled by an operator"
			}
		}
		e, err = scanEndpoint(tx.QueryRow(ctx, `
			UPDATE endpoints SET url = coalesce($2, url), event_types = coalesce($3, event_types),
				description = coalesce($4, description), status = $5, disabled_reason = nullif($6, ''),
				failing_since = CASE WHEN $5 = 'enabled' AND status = 'disabled' THEN NULL ELSE failing_since END,
				updated_at = now()
			WHERE id = $1 RETURNING `+endpointColumns, id, p.URL, types, desc, status, reason))
		if err != nil {
			return err
		}
		if before.Status == StatusDisabled && e.Status == StatusEnabled {
			// What waited goes now, on a fresh schedule: the endpoint was
			// fixed, its failures before are no measure of it.
			_, err = tx.Exec(ctx, `
				UPDATE deliveries SET next_attempt_at = now(), series_attempts = 0
				WHERE endpoint_id = $1 AND status = 'pending' AND next_attempt_at <> 'infinity'`, id)
		}
		return err
	})
	if err != nil && !errors.Is(err, ErrEndpointNotFound) {
		err = fmt.Errorf("update endpoint %s: %w", id, err)
	}
	return e, err
}

// Delete removes endpoint id with its deliveries and their attempts:
// nothing more is sent to it.
//
// It fails with ErrEndpointNotFound.
func (s *Store) Delete(ctx context.Context, id string) error {
	tag, err := s.pool.Exec(ctx, `DELETE FROM endpoints WHERE id = $1`, id)
	if err != nil {
		return fmt.Errorf("delete endpoint %s: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return ErrEndpointNotFound
	}
	return nil
}

// RotateSecret gives endpoint id a new secret and returns it; the previous
// one signs beside it for SecretOverlap.
//
// It fails with ErrEndpointNotFound.
func (s *Store) RotateSecret(ctx context.Context, id string) (string, error) {
	secret, err := NewSecret()
	if err != nil {
		return "", err
	}
	var got string
	err = s.pool.QueryRow(ctx, `
		UPDATE endpoints SET previous_secret = secret, previous_secret_until = now() + make_interval(secs => $3),
			secret = $2, updated_at = now()
		WHERE id = $1 RETURNING secret`, id, secret, SecretOverlap.Seconds()).Scan(&got)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", ErrEndpointNotFound
	}
	if err != nil {
		return "", fmt.Errorf("rotate secret of endpoint %s: %w", id, err)
	}
	return got, nil
}
