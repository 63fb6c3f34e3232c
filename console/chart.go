package console

import (
	"fmt"
	"time"

	"github.com/paygate/paygate/api"
	"github.com/paygate/paygate/reconcile"
)

// chartDays is how far back the reconciliation chart looks.
const chartDays = 30

// The chart's geometry, in SVG user units; the SVG scales to its box.
const (
	chartBarW   = 7
	chartSlot   = 20
	chartHeight = 100
	chartTop    = 8
	chartBase   = chartTop + chartHeight
)

// runChart is the reconciliation page's chart: per day, the latest run's
// matched items against its exceptions. It is drawn on the server as
// inline SVG, because the console's pages carry no script.
type runChart struct {
	Width, Height, Base int
	LabelY              int
	Days                []chartDay
	Max                 int
	From, To            string
}

// chartDay is one day's slot; Run is nil on a day without a run.
type chartDay struct {
	Date                  string
	Label                 string // under every seventh slot and the last
	X, XE                 int    // the matched bar's and the exceptions bar's left edge
	Run                   *api.RunSummaryView
	Matched, Exceptions   int
	MatchedH, ExceptionsH int
	MatchedY, ExceptionsY int
	Failed                bool
}

// newRunChart lays out chartDays days from first; runs holds at most one
// run a day (the latest), and runs outside the window are ignored.
func newRunChart(first time.Time, runs []api.RunSummaryView) *runChart {
	byDate := map[string]*api.RunSummaryView{}
	for i := range runs {
		if runs[i].Date == nil {
			continue // a settlement batch's run: of no one day
		}
		if _, seen := byDate[*runs[i].Date]; !seen {
			byDate[*runs[i].Date] = &runs[i]
		}
	}
	ch := &runChart{Width: chartDays * chartSlot, Height: chartBase + 16, Base: chartBase, LabelY: chartBase + 13}
	for i := range chartDays {
		day := first.AddDate(0, 0, i)
		d := chartDay{Date: day.Format("2006-01-02"), X: i*chartSlot + (chartSlot-2*chartBarW)/2}
		d.XE = d.X + chartBarW
		// A label a week, and the last day's, unless it would overlap the
		// week's label before it.
		if (i%7 == 0 && chartDays-1-i >= 3) || i == chartDays-1 {
			d.Label = day.Format("Jan 2")
		}
		if r := byDate[d.Date]; r != nil {
			d.Run, d.Failed = r, r.Status == string(reconcile.RunFailed)
			// reconcile.Exceptions is the rule the daily alert uses: the chart
			// must not disagree with it about what needs someone.
			exceptions := reconcile.Exceptions(r.Summary)
			for st, n := range r.Summary {
				if _, ok := exceptions[st]; ok {
					d.Exceptions += n
				} else {
					d.Matched += n
				}
			}
			ch.Max = max(ch.Max, d.Matched, d.Exceptions)
		}
		ch.Days = append(ch.Days, d)
	}
	ch.From, ch.To = ch.Days[0].Date, ch.Days[len(ch.Days)-1].Date
	for i := range ch.Days {
		d := &ch.Days[i]
		d.MatchedH, d.ExceptionsH = barHeight(d.Matched, ch.Max), barHeight(d.Exceptions, ch.Max)
		d.MatchedY, d.ExceptionsY = chartBase-d.MatchedH, chartBase-d.ExceptionsH
	}
	return ch
}

// barHeight scales n to the chart; a count above zero gets at least a
// sliver, so that one exception among thousands of matches still shows.
func barHeight(n, peak int) int {
	if n <= 0 || peak <= 0 {
		return 0
	}
	return max(2, n*chartHeight/peak)
}

// Title is a day's tooltip.
func (d chartDay) Title() string {
	if d.Run == nil {
		return d.Date + ": no run"
	}
	return fmt.Sprintf("%s: run #%d %s, %d matched, %d exceptions", d.Date, d.Run.ID, d.Run.Status, d.Matched, d.Exceptions)
}
