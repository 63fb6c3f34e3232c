package api

import (
	"time"

	"github.com/paygate/paygate/jobs"
	"github.com/paygate/paygate/sweep"
)

// SweepView is where a provider's missed-event sweep stands, as
// GET /v1/ops/stats shows it under "sweep", by provider.
type SweepView struct {
	// SweptUntil: every event the provider created before it was looked
	// for; null before the first sweep finished.
	SweptUntil *time.Time `json:"swept_until"`
	// Last is the last finished sweep; null before the first.
	Last *SweepFindingsView `json:"last"`
	// Running is the window of a sweep under way, or cut off and to go on;
	// null when there is none.
	Running *SweepWindowView `json:"running"`
	// FailingSince and LastError: the provider's list has failed since
	// then, without a success; null while it answers.
	FailingSince *time.Time `json:"failing_since"`
	LastError    *string    `json:"last_error"`
}

// SweepWindowView is a window of events' creation times, [from, to).
type SweepWindowView struct {
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
}

// SweepFindingsView is what one finished sweep found.
type SweepFindingsView struct {
	SweepWindowView
	StartedAt  time.Time `json:"started_at"`
	FinishedAt time.Time `json:"finished_at"`
	// New counts the events it ingested (their webhooks never came), Known
	// those paygate had.
	New   int `json:"new"`
	Known int `json:"known"`
	// First and Last are the oldest and newest new events; null with none.
	First *SweptEventView `json:"first"`
	Last  *SweptEventView `json:"last"`
}

// SweptEventView names an event a sweep ingested.
type SweptEventView struct {
	ID      string    `json:"id"`
	Type    string    `json:"type"`
	Created time.Time `json:"created"`
}

func sweptEvent(e *jobs.EmailEvent) *SweptEventView {
	if e == nil {
		return nil
	}
	return &SweptEventView{ID: e.ID, Type: e.Type, Created: e.Created.UTC()}
}

func sweepViews(statuses map[string]sweep.Status) map[string]SweepView {
	out := make(map[string]SweepView, len(statuses))
	for name, st := range statuses {
		v := SweepView{SweptUntil: st.SweptUntil, FailingSince: st.FailingSince}
		if st.LastError != "" {
			msg := st.LastError
			v.LastError = &msg
		}
		if st.Running != nil {
			v.Running = &SweepWindowView{From: st.Running.From, To: st.Running.To}
		}
		if l := st.Last; l != nil {
			v.Last = &SweepFindingsView{SweepWindowView: SweepWindowView{From: l.From, To: l.To},
				StartedAt: l.StartedAt, FinishedAt: l.FinishedAt, New: l.New, Known: l.Known,
				First: sweptEvent(l.First), Last: sweptEvent(l.Last)}
		}
		out[name] = v
	}
	return out
}
