package jobs

import (
	"bytes"
	"embed"
	"fmt"
	htmltemplate "html/template"
	"strings"
	texttemplate "text/template"
)

// Each templates/<kind>.tmpl defines "subject" and "text" (text/template)
// and "body" (html/template, inside layout.html.tmpl's "layout"). They are
// embedded so that the binary is all a deployment needs.
//
//go:embed templates/*.tmpl
var templateFS embed.FS

type emailTemplates struct {
	text *texttemplate.Template
	html *htmltemplate.Template
}

var templatesByKind = mustParseTemplates()

func mustParseTemplates() map[EmailKind]emailTemplates {
	out := make(map[EmailKind]emailTemplates, len(EmailKinds))
	for _, k := range EmailKinds {
		file := "templates/" + string(k) + ".tmpl"
		text := texttemplate.Must(texttemplate.New(string(k)).Option("missingkey=error").ParseFS(templateFS, file))
		html := htmltemplate.Must(htmltemplate.New(string(k)).Option("missingkey=error").
			ParseFS(templateFS, "templates/layout.html.tmpl", file))
		out[k] = emailTemplates{text: text, html: html}
	}
	return out
}

// emailView is what the templates see.
type emailView struct {
	Kind      EmailKind
	ObjectID  string
	PaymentID string
	Amount    string // formatted, e.g. "$360.00"; empty when the email has none
	Reason    string
	Provider  string
	EventID   string
	EventType string
	Date      string // a reconciliation run's day
	Batch     string // or its provider's settlement batch
	RunStatus string // how that run ended
	Endpoint  string // a disabled endpoint's id
	Reference string // the merchant's order reference, when known
	Payments  []paymentLine
	Missed    *missedView // a sweep's findings
	Ref       string      // the Message-ID: quoting it lets support find the outbox row
}

// missedView is a sweep's findings, its times written out (UTC).
type missedView struct {
	Count, Known int
	First, Last  eventLine
	From, To     string
	CLI          bool
}

// eventLine is one event an email names.
type eventLine struct {
	ID, Type, Created string
}

// paymentLine is one payment of a double charge, its amounts formatted.
type paymentLine struct {
	ID, Provider, Status, Captured, Refunded string
}

type renderedEmail struct {
	Subject, Text, HTML string
}

func renderEmail(kind EmailKind, objectID, messageID string, d emailData) (renderedEmail, error) {
	t, ok := templatesByKind[kind]
	if !ok {
		return renderedEmail{}, fmt.Errorf("render %s: no template", kind)
	}
	v := emailView{
		Kind: kind, ObjectID: objectID, PaymentID: d.PaymentID, Reason: d.Reason,
		Provider: d.Provider, EventID: d.EventID, EventType: d.EventType, Date: d.Date, Batch: d.Batch, RunStatus: d.RunStatus, Ref: messageID,
		Endpoint: d.Endpoint, Reference: d.Reference,
	}
	for _, p := range d.Payments {
		v.Payments = append(v.Payments, paymentLine{ID: p.ID, Provider: p.Provider, Status: p.Status,
			Captured: FormatAmount(p.AmountCaptured, p.Currency), Refunded: FormatAmount(p.AmountRefunded, p.Currency)})
	}
	if d.Amount != "" {
		v.Amount = FormatAmount(d.Amount, d.Currency)
	}
	if m := d.Missed; m != nil {
		line := func(e EmailEvent) eventLine {
			return eventLine{ID: e.ID, Type: e.Type, Created: e.Created.UTC().Format(emailTime)}
		}
		v.Missed = &missedView{Count: m.Count, Known: m.Known, First: line(m.First), Last: line(m.Last),
			From: m.From.UTC().Format(emailTime), To: m.To.UTC().Format(emailTime), CLI: m.Trigger == "cli"}
	}
	var subject, text, html bytes.Buffer
	if err := t.text.ExecuteTemplate(&subject, "subject", v); err != nil {
		return renderedEmail{}, fmt.Errorf("render %s subject: %w", kind, err)
	}
	if err := t.text.ExecuteTemplate(&text, "text", v); err != nil {
		return renderedEmail{}, fmt.Errorf("render %s text: %w", kind, err)
	}
	if err := t.html.ExecuteTemplate(&html, "layout", v); err != nil {
		return renderedEmail{}, fmt.Errorf("render %s html: %w", kind, err)
	}
	return renderedEmail{
		Subject: strings.Join(strings.Fields(subject.String()), " "),
		Text:    text.String(),
		HTML:    html.String(),
	}, nil
}

// emailTime is how emails write a time: to the second, in UTC.
const emailTime = "2006-01-02 15:04:05 UTC"

// currencySymbols are the few currencies shown with a symbol; every other
// is shown as its uppercase code, which is never ambiguous.
var currencySymbols = map[string]string{"usd": "$", "eur": "€", "gbp": "£", "jpy": "¥"}

// FormatAmount shows a decimal amount string in major units for people:
// "$360.00" (usd), "¥1000" (jpy), "KWD 1.234" (kwd). The digits are the
// caller's, untouched: amount must already be at the currency's scale, as
// the API shows it, so nothing is rounded here.
func FormatAmount(amount, currency string) string {
	if sym, ok := currencySymbols[strings.ToLower(currency)]; ok {
		return sym + amount
	}
	return strings.ToUpper(currency) + " " + amount
}
