package reconcile

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// A provider that settles in batches (Adyen) announces each batch's report
// by a notification naming its file and URL; the file is downloaded once
// and kept as received, with its SHA-256, so that every run of the batch
// reads the very bytes the provider wrote and finance can prove it.

// ReportStatus is where a settlement report stands.
type ReportStatus string

// The report statuses. A report is notified, then stored once downloaded;
// a download refused by configuration (a host not allowed) or given up
// after its attempts is refused or failed, and a new notification of the
// file (a replayed event) sets it back to notified.
const (
	ReportNotified ReportStatus = "notified"
	ReportStored   ReportStatus = "stored"
	ReportRefused  ReportStatus = "refused"
	ReportFailed   ReportStatus = "failed"
)

// ErrReportNotFound: no report has that file name, or no stored report
// that batch.
var ErrReportNotFound = errors.New("settlement report not found")

// ReportNotice is a provider's word that a settlement report can be
// downloaded: its file name (unique per provider), URL and batch, and the
// event that said so.
type ReportNotice struct {
	Provider string
	FileName string
	URL      string
	Batch    int64
	EventID  string
}

// SettlementReport is a provider's settlement report file as paygate
// keeps it.
type SettlementReport struct {
	ID           int64
	Provider     string
	FileName     string
	URL          string
	Batch        int64
	EventID      string
	Status       ReportStatus
	Error        string // why it was refused or failed, or the last attempt's error
	NotifiedAt   time.Time
	DownloadedAt *time.Time
	Size         int64
	SHA256       string // hex, lowercase
	Body         []byte // the file as downloaded; nil until stored
}

const reportColumns = `id, provider, file_name, url, batch, event_id, status, coalesce(error, ''), notified_at,
	downloaded_at, coalesce(size, 0), coalesce(sha256, ''), body`

func scanReport(row pgx.Row) (SettlementReport, error) {
	var r SettlementReport
	err := row.Scan(&r.ID, &r.Provider, &r.FileName, &r.URL, &r.Batch, &r.EventID, &r.Status, &r.Error, &r.NotifiedAt,
		&r.DownloadedAt, &r.Size, &r.SHA256, &r.Body)
	if errors.Is(err, pgx.ErrNoRows) {
		return SettlementReport{}, ErrReportNotFound
	}
	return r, err
}

// NoteReportTx records a report's notification in tx. noted is true when
// the download is to be made (the caller enqueues it in the same
// transaction): a file never notified before, or one whose download was
// refused or failed, which a new notification retries. A file notified
// already, downloading or stored, is left as it is: the same report
// announced twice is downloaded once.
func NoteReportTx(ctx context.Context, tx pgx.Tx, n ReportNotice) (noted bool, err error) {
	var id int64
	err = tx.QueryRow(ctx, `
		INSERT INTO settlement_reports (provider, file_name, url, batch, event_id) VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (provider, file_name) DO UPDATE
			SET url = excluded.url, event_id = excluded.event_id, status = 'notified', error = NULL, notified_at = now()
			WHERE settlement_reports.status IN ('refused', 'failed')
		RETURNING id`, n.Provider, n.FileName, n.URL, n.Batch, n.EventID).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("note settlement report %s: %w", n.FileName, err)
	}
	return true, nil
}

// GetReport returns a provider's report by file name, its body included
// once stored. It fails with ErrReportNotFound.
func GetReport(ctx context.Context, q Querier, provider, fileName string) (SettlementReport, error) {
	r, err := scanReport(q.QueryRow(ctx, `SELECT `+reportColumns+` FROM settlement_reports
		WHERE provider = $1 AND file_name = $2`, provider, fileName))
	if err != nil {
		return SettlementReport{}, fmt.Errorf("settlement report %s %s: %w", provider, fileName, err)
	}
	return r, nil
}

// ReportOfBatch returns the stored report of a provider's batch, body
// included. It fails with ErrReportNotFound.
func ReportOfBatch(ctx context.Context, q Querier, provider string, batch int64) (SettlementReport, error) {
	r, err := scanReport(q.QueryRow(ctx, `SELECT `+reportColumns+` FROM settlement_reports
		WHERE provider = $1 AND batch = $2 AND status = 'stored' ORDER BY id LIMIT 1`, provider, batch))
	if err != nil {
		return SettlementReport{}, fmt.Errorf("stored settlement report of %s batch %d: %w", provider, batch, err)
	}
	return r, nil
}

// StoreReportTx keeps a report's downloaded file and its SHA-256 in tx.
// stored is false when the file was kept already (another attempt got
// there first): the first file kept stays, byte for byte. It fails with
// ErrReportNotFound.
func StoreReportTx(ctx context.Context, tx pgx.Tx, provider, fileName string, body []byte) (r SettlementReport, stored bool, err error) {
	sum := sha256.Sum256(body)
	r, err = scanReport(tx.QueryRow(ctx, `
		UPDATE settlement_reports SET status = 'stored', error = NULL, body = $3, sha256 = $4, size = $5, downloaded_at = now()
		WHERE provider = $1 AND file_name = $2 AND status <> 'stored'
		RETURNING `+reportColumns, provider, fileName, body, hex.EncodeToString(sum[:]), len(body)))
	if err == nil {
		return r, true, nil
	}
	if !errors.Is(err, ErrReportNotFound) {
		return SettlementReport{}, false, fmt.Errorf("store settlement report %s: %w", fileName, err)
	}
	r, err = GetReport(ctx, tx, provider, fileName)
	return r, false, err
}

// SetReportStatusTx records, in tx, that a report's download was refused
// or failed for good (status ReportRefused or ReportFailed), or the error
// of an attempt that will be retried (status ReportNotified). A stored
// report is left as it is.
func SetReportStatusTx(ctx context.Context, q Querier, provider, fileName string, status ReportStatus, reason string) error {
	_, err := q.Exec(ctx, `UPDATE settlement_reports SET status = $3, error = $4
		WHERE provider = $1 AND file_name = $2 AND status <> 'stored'`, provider, fileName, status, reason)
	if err != nil {
		return fmt.Errorf("record settlement report %s %s: %w", fileName, status, err)
	}
	return nil
}
