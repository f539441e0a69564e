package remote

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	scheduler "github.com/procsched/scheduler"
)

// TestConfigDefaults: a Config with only Cluster and Name gets the
// defaults docs/remote.md lists, and a Heartbeat long enough that five
// seconds would be under three of them gets a FailureTimeout of three.
func TestConfigDefaults(t *testing.T) {
	cfg, err := Config{Cluster: "c", Name: "a"}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	want := Config{
		Cluster: "c", Name: "a", URL: nats.DefaultURL,
		Heartbeat: time.Second, FailureTimeout: 5 * time.Second,
		Window: 1 << 20, MaxBuffered: 4 << 20, SpawnCommand: 512,
	}
	if cfg.URL != want.URL || cfg.Heartbeat != want.Heartbeat || cfg.FailureTimeout != want.FailureTimeout ||
		cfg.Window != want.Window || cfg.MaxBuffered != want.MaxBuffered || cfg.SpawnCommand != want.SpawnCommand {
		t.Errorf("defaults are %+v, want %+v", cfg, want)
	}

	cfg, err = Config{Cluster: "c", Name: "a", Heartbeat: 2 * time.Second}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.FailureTimeout != 6*time.Second {
		t.Errorf("FailureTimeout for a 2s heartbeat is %v, want three heartbeats", cfg.FailureTimeout)
	}
}

// TestConfigBounds: each value out of its documented range is refused
// with ErrInvalidConfig, and the values at the bounds are taken.
func TestConfigBounds(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Config)
		ok   bool
	}{
		{"a negative heartbeat", func(c *Config) { c.Heartbeat = -time.Second }, false},
		{"a heartbeat of a few nanoseconds", func(c *Config) { c.Heartbeat = 3 * time.Nanosecond }, false},
		{"a heartbeat just under a millisecond", func(c *Config) { c.Heartbeat = time.Millisecond - 1 }, false},
		{"a heartbeat of a millisecond", func(c *Config) { c.Heartbeat = time.Millisecond }, true},
		{"a heartbeat whose three make no Duration", func(c *Config) { c.Heartbeat = 1 << 62 }, false},
		{"the longest heartbeat", func(c *Config) { c.Heartbeat = math.MaxInt64 / 3 }, true},
		{"a heartbeat just above the longest", func(c *Config) { c.Heartbeat = math.MaxInt64/3 + 1 }, false},
		{"the longest failure timeout", func(c *Config) { c.FailureTimeout = math.MaxInt64 }, true},
		{"the largest MaxBuffered", func(c *Config) { c.MaxBuffered = math.MaxInt }, true},
		{"the largest window", func(c *Config) { c.Window = math.MaxInt }, true},
		{"a negative failure timeout", func(c *Config) { c.FailureTimeout = -time.Second }, false},
		{"a failure timeout of three heartbeats", func(c *Config) { c.Heartbeat, c.FailureTimeout = time.Second, 3*time.Second }, true},
		{"a negative window", func(c *Config) { c.Window = -1 }, false},
		{"a window of 4 KiB", func(c *Config) { c.Window = 4 << 10 }, true},
		{"a window just under 4 KiB", func(c *Config) { c.Window = 4<<10 - 1 }, false},
		{"a negative MaxBuffered", func(c *Config) { c.MaxBuffered = -1 }, false},
		{"a name of 128 bytes", func(c *Config) { c.Name = strings.Repeat("n", 128) }, true},
		{"a name of 129 bytes", func(c *Config) { c.Name = strings.Repeat("n", 129) }, false},
		{"a cluster of 128 bytes", func(c *Config) { c.Cluster = strings.Repeat("c", 128) }, true},
		{"a cluster of 129 bytes", func(c *Config) { c.Cluster = strings.Repeat("c", 129) }, false},
		{"the first user command", func(c *Config) { c.SpawnCommand = scheduler.FirstUserCommand }, true},
		{"the last command", func(c *Config) { c.SpawnCommand = 1 << 16 }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{Cluster: "c", Name: "a"}
			tc.edit(&cfg)
			_, err := cfg.withDefaults()
			switch {
			case tc.ok && err != nil:
				t.Errorf("refused: %v", err)
			case !tc.ok && !errors.Is(err, ErrInvalidConfig):
				t.Errorf("got %v, want ErrInvalidConfig", err)
			}
		})
	}
}

// TestLongestFailureTimeoutAfterAReconnect: after a reconnect, a probe
// that finds no one counts only once the peers have had FailureTimeout
// to reconnect; the longest FailureTimeout does not wrap that moment
// around to the past.
func TestLongestFailureTimeoutAfterAReconnect(t *testing.T) {
	n := &Node{cfg: Config{FailureTimeout: math.MaxInt64}, nc: &nats.Conn{}}
	empty := map[uint32]*peer{}
	n.peers.Store(&empty)
	before := time.Now().UnixNano()
	n.onReconnect()
	if from := n.probesFrom.Load(); from < before {
		t.Errorf("probes count from %d, before the reconnect at %d", from, before)
	}
}
