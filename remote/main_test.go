package remote_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if role := os.Getenv(subprocessEnv); role != "" {
		os.Exit(subprocessMain(role))
	}
	goleak.VerifyTestMain(m)
}
