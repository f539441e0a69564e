package remote_test

// helperMain runs the helper named name in a re-executed test binary and
// returns its exit code.
func helperMain(name string) int { return 2 }
