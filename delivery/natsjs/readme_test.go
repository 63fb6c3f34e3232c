package natsjs_test

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/delivery/natsjs"
)

// TestReadmeConsumer builds docs/downstream.md's JetStream consumer as written
// (only the server's address put in for the test's), runs it, publishes
// messages, and reads each one from its output, with its id.
func TestReadmeConsumer(t *testing.T) {
	t.Parallel()
	b := setup(t)
	p := b.publisher(t)
	require.NoError(t, p.EnsureStream(t.Context()))

	guide, err := os.ReadFile("../../docs/downstream.md")
	require.NoError(t, err)
	var src string
	for _, m := range regexp.MustCompile("(?s)```go\n(.*?)```").FindAllStringSubmatch(string(guide), -1) {
		if strings.Contains(m[1], "jetstream.New(") {
			src = m[1]
		}
	}
	require.NotEmpty(t, src, "docs/downstream.md has the JetStream consumer")
	require.Contains(t, src, "nats://127.0.0.1:4222")
	src = strings.ReplaceAll(src, "nats://127.0.0.1:4222", b.nats.url())

	// Inside the module, so that it builds with the module's nats.go; a
	// directory starting with "_" is no package of ours.
	dir, err := os.MkdirTemp(".", "_readme-consumer-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	require.NoError(t, os.WriteFile(filepath.Join(dir, "printer.go"), []byte(src), 0o600))
	bin := filepath.Join(t.TempDir(), "printer")
	out, err := exec.Command("go", "build", "-o", bin, filepath.Join(dir, "printer.go")).CombinedOutput()
	require.NoError(t, err, "docs/downstream.md's consumer builds:\n%s", out)

	consumer := exec.Command(bin)
	stdout, err := consumer.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, consumer.Start())
	t.Cleanup(func() { _ = consumer.Process.Kill(); _ = consumer.Wait() })
	lines := make(chan string)
	go func() {
		s := bufio.NewScanner(stdout)
		for s.Scan() {
			lines <- s.Text()
		}
		close(lines)
	}()

	msgs := interleaved(t, "pi_readme", 2, 2)
	b.write(t, msgs...)
	b.sequence(t)
	_, err = p.Publish(t.Context(), b.river)
	require.NoError(t, err)
	for _, m := range msgs {
		select {
		case line, ok := <-lines:
			require.True(t, ok, "the consumer stopped")
			require.Equal(t, natsjs.DefaultSubjectPrefix+"."+m.Type+" "+m.ID+" "+string(m.Body), line)
		case <-time.After(30 * time.Second):
			t.Fatalf("the consumer printed nothing for %s", m.ID)
		}
	}
}
