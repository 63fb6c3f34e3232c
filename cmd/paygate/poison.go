package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/user"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paygate/paygate/api"
	"github.com/paygate/paygate/inbox"
	"github.com/paygate/paygate/jobs"
	"github.com/paygate/paygate/provider/stripe"
)

const poisonUsage = `usage:
  paygate poison list [--type T] [--error TEXT] [--after RFC3339] [--before RFC3339] [--limit N] [--cursor C]
  paygate poison show EVENT_ID
  paygate poison replay EVENT_ID [--reason R]
  paygate poison discard EVENT_ID --reason R

Operates on the database directly, as the ops API does; actions are audited
as cli:$USER.
`

// cmdPoison is the operators' view of the poison queue on the box itself:
// the same package functions as the ops API, the same audit log.
func cmdPoison(ctx context.Context, cfg config, logger *slog.Logger, args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return usageError{"poison: missing subcommand (list, show, replay, discard)\n\n" + poisonUsage}
	}
	sub, args := args[0], args[1:]
	switch sub {
	case "list", "show", "replay", "discard":
	case "-h", "--help", "help":
		fmt.Fprint(stdout, poisonUsage)
		return nil
	default:
		return usageError{fmt.Sprintf("poison: unknown subcommand %q\n\n%s", sub, poisonUsage)}
	}
	pool, err := openPool(ctx, cfg, 4)
	if err != nil {
		return err
	}
	defer pool.Close()
	switch sub {
	case "list":
		return poisonList(ctx, pool, args, stdout)
	case "show":
		return poisonShow(ctx, pool, args, stdout)
	default:
		jc, err := jobs.NewClient(pool, jobs.Config{Logger: logger, InsertOnly: true, ProcessMaxAttempts: cfg.ProcessMaxAttempts})
		if err != nil {
			return err
		}
		return poisonAct(ctx, pool, jc, sub, args, stdout)
	}
}

// cliActor names the operator in the audit log.
func cliActor() string {
	// The account the process runs as, not $USER, which anyone can set.
	name := "uid " + strconv.Itoa(os.Getuid())
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	return "cli:" + name
}

// parseInterleaved parses flags that may come before or after the one
// positional argument (paygate poison discard evt_1 --reason "…").
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, usageError{err.Error()}
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}

func poisonList(ctx context.Context, pool *pgxpool.Pool, args []string, stdout io.Writer) error {
	fs := newFlagSet("poison list")
	typ := fs.String("type", "", "event type")
	errText := fs.String("error", "", "text in the last error")
	after := fs.String("after", "", "received after (RFC 3339)")
	before := fs.String("before", "", "received before (RFC 3339)")
	limit := fs.Int("limit", inbox.DefaultLimit, "events per page")
	cursor := fs.String("cursor", "", "page cursor from a previous list")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageError{"poison list takes no arguments, only flags"}
	}
	f := inbox.Filter{Status: inbox.StatusPoison, Type: *typ, ErrorContains: *errText}
	for _, tv := range []struct {
		name string
		in   string
		out  *time.Time
	}{{"--after", *after, &f.ReceivedAfter}, {"--before", *before, &f.ReceivedBefore}} {
		if tv.in == "" {
			continue
		}
		t, err := time.Parse(time.RFC3339Nano, tv.in)
		if err != nil {
			return usageError{fmt.Sprintf("%s must be an RFC 3339 time, got %q", tv.name, tv.in)}
		}
		*tv.out = t
	}
	events, next, err := inbox.List(ctx, pool, f, inbox.Page{Cursor: *cursor, Limit: *limit})
	if errors.Is(err, inbox.ErrBadCursor) {
		return usageError{"--cursor is not one paygate printed"}
	}
	if err != nil {
		return err
	}
	if len(events) == 0 {
		fmt.Fprintln(stdout, "no poison events")
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "EVENT ID\tTYPE\tATTEMPTS\tRECEIVED\tLAST ERROR")
	for _, e := range events {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", e.EventID, e.Type, e.Attempts,
			e.ReceivedAt.UTC().Format(time.RFC3339), oneLine(e.LastError, 80))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if next != "" {
		fmt.Fprintf(stdout, "\nmore: paygate poison list --cursor %s\n", next)
	}
	return nil
}

// providerFlag is --provider: event ids mean something within their
// provider only.
func providerFlag(fs *flag.FlagSet) *string {
	return fs.String("provider", stripe.Name, "the event's provider: stripe, adyen, or a Standard Webhooks source")
}

// oneLine keeps a table row on one line.
func oneLine(s string, max int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > max {
		return string(r[:max-1]) + "…"
	}
	return s
}

func poisonShow(ctx context.Context, pool *pgxpool.Pool, args []string, stdout io.Writer) error {
	fs := newFlagSet("poison show")
	providerName := providerFlag(fs)
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageError{"poison show takes one EVENT_ID"}
	}
	ev, err := inbox.Get(ctx, pool, *providerName, pos[0])
	if err != nil {
		return err
	}
	errs, err := jobs.AttemptErrors(ctx, pool, ev.Provider, []string{ev.EventID})
	if err != nil {
		return err
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(api.NewOpsEventView(ev, errs[ev.EventID], true))
}

func poisonAct(ctx context.Context, pool *pgxpool.Pool, jc *jobs.Client, sub string, args []string, stdout io.Writer) error {
	fs := newFlagSet("poison " + sub)
	reason := fs.String("reason", "", "why (required to discard)")
	providerName := providerFlag(fs)
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageError{fmt.Sprintf("poison %s takes one EVENT_ID", sub)}
	}
	op := inbox.Operation{Actor: cliActor(), Reason: strings.TrimSpace(*reason)}
	if sub == "discard" && op.Reason == "" {
		return usageError{"poison discard needs --reason: the audit log must say why"}
	}
	var ev inbox.Event
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var err error
		if sub == "replay" {
			ev, err = jc.ReplayEventTx(ctx, tx, *providerName, pos[0], op)
		} else {
			ev, err = jc.DiscardEventTx(ctx, tx, *providerName, pos[0], op)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("%s %s: %w", sub, pos[0], err)
	}
	verb := map[string]string{"replay": "replayed", "discard": "discarded"}[sub]
	fmt.Fprintf(stdout, "%s %s: status %s, %d attempts so far (audited as %s)\n", verb, ev.EventID, ev.Status, ev.Attempts, op.Actor)
	return nil
}
