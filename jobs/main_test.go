package jobs_test

import (
	"flag"
	"os"
	"testing"
)

// TestMain keeps the property tests, which run whole lifecycles through the
// database, to 30 cases in `make test`; -rapid.checks=N asks for more.
func TestMain(m *testing.M) {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "rapid.checks" })
	if !set {
		_ = flag.Set("rapid.checks", "30")
	}
	os.Exit(m.Run())
}
