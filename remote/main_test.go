package remote_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if helper := os.Getenv(helperEnv); helper != "" {
		os.Exit(helperMain(helper))
	}
	goleak.VerifyTestMain(m)
}
