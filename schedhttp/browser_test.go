//go:build unix

package schedhttp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"io"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/procsched/scheduler"
	"github.com/procsched/scheduler/relay"
	"github.com/procsched/scheduler/schedhttp"
)

// The debug page in a real browser: headless Chromium loads it from an
// httptest server and prints the DOM it built, which the test reads. This
// shows what httptest cannot: that a browser parses the page into the
// tables and text the httptest tests look for in the bytes, and shows
// the JSON view as the JSON of a Stats.

// browserEnv names the Chromium binary to use. When it is set, as
// `make test` sets it, a missing or failing browser fails the test; when
// it is not, the test looks for Chromium on PATH and skips without one.
const browserEnv = "PROCSCHED_BROWSER"

// browserTimeout bounds one browser run; past it the browser and every
// process it started are killed. A run takes about a second on an idle
// machine, so this only catches a browser that hangs.
const browserTimeout = time.Minute

// lookBrowser returns the browser named by env, the value of browserEnv,
// or else the first Chromium on PATH; "" when env is empty and there is
// none. A browser that env names but that cannot be found is an error.
func lookBrowser(env string) (string, error) {
	if env != "" {
		path, err := exec.LookPath(env)
		if err != nil {
			return "", fmt.Errorf("%s=%q: %w; run `make browser` to install Chromium", browserEnv, env, err)
		}
		return path, nil
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if path, err := exec.LookPath(name); err == nil {
			return path, nil
		}
	}
	return "", nil
}

// findBrowser returns the browser to run, or skips the test.
func findBrowser(t *testing.T) string {
	t.Helper()
	path, err := lookBrowser(os.Getenv(browserEnv))
	require.NoError(t, err)
	if path == "" {
		t.Skipf("no Chromium on PATH and %s not set: run `make browser` (as root, on Debian) to install it", browserEnv)
	}
	return path
}

// dumpDOM loads url in headless Chromium with a fresh profile in dir and
// returns the DOM it built, serialised as HTML. A browser that fails,
// prints nothing, or runs past timeout is an error; at the timeout it is
// killed, with every process it started.
func dumpDOM(browser, dir, url string, timeout time.Duration) (string, error) {
	home := filepath.Join(dir, "home")
	profile := filepath.Join(dir, "profile")
	if err := os.Mkdir(home, 0o700); err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, browser,
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
		"--no-first-run", "--disable-background-networking",
		"--disable-component-update", "--disable-sync",
		"--user-data-dir="+profile, "--dump-dom", url)
	// A home of its own, so that nothing is read from or left in the
	// user's: the profile is not all Chromium writes.
	cmd.Env = append(os.Environ(), "HOME="+home,
		"XDG_CONFIG_HOME="+filepath.Join(home, ".config"),
		"XDG_CACHE_HOME="+filepath.Join(home, ".cache"))
	// Chromium runs as several processes. In a process group of their
	// own they can all be killed at once: at the timeout, and after the
	// browser exits in case a helper outlives it, before the directory
	// they write to is removed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second // a helper holding stdout open does not hang Wait
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr

	err := cmd.Run()
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // ESRCH when none is left
	}
	switch {
	case ctx.Err() != nil:
		return "", fmt.Errorf("the browser did not finish within %v and was killed; its stderr ends:\n%s", timeout, tail(stderr.Bytes()))
	case err != nil:
		return "", fmt.Errorf("the browser failed: %w; its stderr ends:\n%s", err, tail(stderr.Bytes()))
	case stdout.Len() == 0:
		return "", fmt.Errorf("the browser printed no DOM; its stderr ends:\n%s", tail(stderr.Bytes()))
	}
	return stdout.String(), nil
}

// load is dumpDOM for a test: any failure fails it.
func load(t *testing.T, browser, url string) string {
	t.Helper()
	start := time.Now()
	dom, err := dumpDOM(browser, t.TempDir(), url, browserTimeout)
	require.NoError(t, err)
	t.Logf("%s --dump-dom %s: %v", filepath.Base(browser), url, time.Since(start).Round(time.Millisecond))
	return dom
}

// tail returns the end of a browser's stderr, which is long and mostly
// noise about services a headless browser does without.
func tail(b []byte) string {
	const max = 2 << 10
	if len(b) > max {
		b = b[len(b)-max:]
	}
	return string(b)
}

var (
	titleRE   = regexp.MustCompile(`(?s)<title>(.*?)</title>`)
	tableRE   = regexp.MustCompile(`(?s)<table[^>]*>(.*?)</table>`)
	captionRE = regexp.MustCompile(`(?s)<caption[^>]*>(.*?)</caption>`)
	rowRE     = regexp.MustCompile(`(?s)<tr([^>]*)>(.*?)</tr>`)
	cellRE    = regexp.MustCompile(`(?s)<t[hd][^>]*>(.*?)</t[hd]>`)
	preRE     = regexp.MustCompile(`(?s)<pre[^>]*>(.*?)</pre>`)
	tagRE     = regexp.MustCompile(`<[^>]*>`)
)

// text is the text of an HTML fragment: tags dropped, entities decoded.
func text(fragment string) string {
	return strings.TrimSpace(html.UnescapeString(tagRE.ReplaceAllString(fragment, "")))
}

// domTable is a table of the rendered page.
type domTable struct {
	caption string
	rows    [][]string // the text of each row's cells
	classes []string   // each row's attributes, as serialised
}

// tables returns the tables of a DOM dump.
func tables(dom string) []domTable {
	var out []domTable
	for _, tm := range tableRE.FindAllStringSubmatch(dom, -1) {
		var tab domTable
		if c := captionRE.FindStringSubmatch(tm[1]); c != nil {
			tab.caption = text(c[1])
		}
		for _, rm := range rowRE.FindAllStringSubmatch(tm[1], -1) {
			var cells []string
			for _, cm := range cellRE.FindAllStringSubmatch(rm[2], -1) {
				cells = append(cells, text(cm[1]))
			}
			tab.rows = append(tab.rows, cells)
			tab.classes = append(tab.classes, strings.TrimSpace(rm[1]))
		}
		out = append(out, tab)
	}
	return out
}

// figures maps each captioned table's row labels to their values:
// figures["Processes"]["live"] is the live count the page shows.
func figures(tabs []domTable) map[string]map[string]string {
	out := make(map[string]map[string]string)
	for _, tab := range tabs {
		if tab.caption == "" {
			continue
		}
		m := make(map[string]string)
		for _, cells := range tab.rows {
			if len(cells) == 2 {
				m[cells[0]] = cells[1]
			}
		}
		out[tab.caption] = m
	}
	return out
}

func TestHandlerInBrowser(t *testing.T) {
	browser := findBrowser(t)
	s := newScheduler(t, scheduler.WithWorkers(2))
	// The last method would be markup if the page did not escape it.
	methods := []string{"alpha", "beta", `gamma <b id="x">&amp;</b>`}
	pids := make([]relay.PID, len(methods))
	for i, m := range methods {
		pids[i] = submit(t, s, waiter{}, m).PID()
	}
	for _, pid := range pids {
		waitIdle(t, s, pid)
	}
	eventually(t, "the scheduler to come to rest", func() bool {
		st := s.Stats()
		return st.Processes.Live == int64(len(methods)) && st.Processes.Idle == int64(len(methods)) &&
			st.Steps == uint64(len(methods)) && st.IdleWorkers == st.Workers
	})
	srv := httptest.NewServer(schedhttp.Handler(s))
	defer srv.Close()

	t.Run("html", func(t *testing.T) {
		dom := load(t, browser, srv.URL+"/debug/scheduler?processes=10")
		want := s.Stats()
		title := titleRE.FindStringSubmatch(dom)
		require.NotNil(t, title, "no title in the DOM:\n%s", dom)
		require.Equal(t, "scheduler", text(title[1]))
		// The browser, not the handler, puts rows in a tbody: the DOM is
		// the parsed page, not its bytes echoed.
		require.Contains(t, dom, "<tbody>", "DOM:\n%s", dom)
		require.NotContains(t, dom, "<script", "DOM:\n%s", dom)
		require.NotContains(t, dom, `<b id="x">`, "a method name became markup:\n%s", dom)

		tabs := tables(dom)
		figs := figures(tabs)
		for _, caption := range []string{"Queues", "Processes", "Totals", "Messages", "Dead letters", "Blocking pool", "Steps", "Finding work"} {
			require.Contains(t, figs, caption, "tables by caption: %v\nDOM:\n%s", figs, dom)
		}
		procs := figs["Processes"]
		require.Equal(t, strconv.FormatInt(want.Processes.Live, 10), procs["live"], "live; figures: %v", procs)
		require.Equal(t, strconv.FormatInt(want.Processes.Idle, 10), procs["idle"], "idle; figures: %v", procs)
		require.Equal(t, "3", procs["live"])
		totals := figs["Totals"]
		require.Equal(t, strconv.FormatUint(want.Processes.Submitted, 10), totals["submitted"], "submitted; figures: %v", totals)
		require.Equal(t, strconv.FormatUint(want.Steps, 10), figs["Steps"]["steps"], "steps; figures: %v", figs["Steps"])
		require.Len(t, figs["Queues"], 2+want.Workers, "queues: global, one per worker, timers: %v", figs["Queues"])
		require.Contains(t, dom, "3 of 3 processes, by PID")

		// The listing: one row per live process, by PID, with its method
		// shown as text.
		var listed [][]string
		for _, tab := range tabs {
			for i, cls := range tab.classes {
				if cls == `class="proc"` {
					listed = append(listed, tab.rows[i])
				}
			}
		}
		require.Len(t, listed, len(methods), "listed rows; DOM:\n%s", dom)
		for i, cells := range listed {
			require.Len(t, cells, 5, "row %d: %q", i, cells)
			require.Equal(t, pids[i].String(), cells[0], "row %d PID", i)
			require.Equal(t, methods[i], cells[1], "row %d method", i)
			require.Equal(t, "Idle", cells[2], "row %d state", i)
		}
	})

	t.Run("json", func(t *testing.T) {
		dom := load(t, browser, srv.URL+"/debug/scheduler?format=json")
		want := s.Stats()
		// Chromium shows a JSON response as text in a pre element.
		pre := preRE.FindStringSubmatch(dom)
		require.NotNil(t, pre, "no pre element in the DOM:\n%s", dom)
		var got scheduler.Stats
		dec := json.NewDecoder(strings.NewReader(html.UnescapeString(pre[1])))
		dec.DisallowUnknownFields()
		require.NoError(t, dec.Decode(&got), "DOM:\n%s", dom)
		_, err := dec.Token()
		require.ErrorIs(t, err, io.EOF, "more after the JSON; DOM:\n%s", dom)
		require.Equal(t, want.Workers, got.Workers)
		require.Equal(t, want.Processes.Live, got.Processes.Live)
		require.Equal(t, int64(len(methods)), got.Processes.Live)
		require.Equal(t, want.Processes.Submitted, got.Processes.Submitted)
	})
}

// TestBrowserFailures shows that the browser test cannot pass or skip
// by mistake: a browser that is named but missing, fails, prints nothing
// or hangs is an error, and only an unset variable with no Chromium on
// PATH means skipping.
func TestBrowserFailures(t *testing.T) {
	dir := t.TempDir()
	script := func(name, body string) string {
		path := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(path, []byte("#!/bin/sh\n"+body+"\n"), 0o755))
		return path
	}

	t.Run("named but missing", func(t *testing.T) {
		_, err := lookBrowser(filepath.Join(dir, "no-such-browser"))
		require.ErrorIs(t, err, os.ErrNotExist)
		require.ErrorContains(t, err, "make browser")
	})
	t.Run("none on PATH", func(t *testing.T) {
		t.Setenv("PATH", t.TempDir())
		path, err := lookBrowser("")
		require.NoError(t, err)
		require.Empty(t, path)
	})
	tests := []struct {
		name, body, want string
		timeout          time.Duration
	}{
		{name: "fails", body: "echo crashed >&2; exit 3", want: "the browser failed: exit status 3", timeout: browserTimeout},
		{name: "prints nothing", body: "exit 0", want: "printed no DOM", timeout: browserTimeout},
		// The shell waits for a child, as Chromium has helper processes:
		// the child must be killed too.
		{name: "hangs", body: "sleep 600 & echo $! >\"$HOME/../child\"; wait", want: "did not finish within 100ms", timeout: 100 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			browser := script(strings.ReplaceAll(tt.name, " ", "-"), tt.body)
			dir := t.TempDir()
			dom, err := dumpDOM(browser, dir, "http://127.0.0.1:1/", tt.timeout)
			require.ErrorContains(t, err, tt.want)
			require.Empty(t, dom)
			if b, err := os.ReadFile(filepath.Join(dir, "child")); err == nil {
				child, err := strconv.Atoi(strings.TrimSpace(string(b)))
				require.NoError(t, err)
				eventually(t, fmt.Sprintf("the browser's child %d to be killed", child), func() bool { return gone(child) })
			}
		})
	}
}

// gone reports whether process pid has ended: it no longer exists, or
// only as a zombie waiting for its new parent to collect it.
func gone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return errors.Is(err, os.ErrNotExist) // no /proc: alive, as far as we can tell
	}
	// The state follows the command name, which is in parentheses.
	i := bytes.LastIndexByte(stat, ')')
	return i >= 0 && i+2 < len(stat) && stat[i+2] == 'Z'
}
