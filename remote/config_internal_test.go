package remote

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"
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
