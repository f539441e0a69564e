package main

import (
	"bytes"
	"context"
	"debug/buildinfo"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// The -pgo option measures the implementations as a program built with
// profile-guided optimisation runs them. Given a CPU profile of a
// program's typical work, the Go compiler (1.21 and later) inlines the
// calls the profile shows to be hot well beyond its usual size limit,
// and turns hot calls through an interface into direct calls where one
// concrete type dominates. A service that ships with a profile gets this
// for its dependencies too, this scheduler included; the harness gives
// every implementation the same treatment, each from a profile of its
// own runs, so that the comparison stays even.
//
// With -pgo the harness builds every binary as usual, runs it once on
// each of the selected workloads and variants it serves (with no -load),
// merges those runs' CPU profiles into one, and builds the binary again
// with that profile before the measured rounds. The profile so covers
// exactly the work measured afterwards: the best case for the
// optimisation, as for a service whose profile was taken under its own
// traffic. The profiling runs are at -size, but at least at the full
// size (1): the profiler samples a hundred times a second, and at the
// sizes of -quick a run is over before it takes a sample, where the
// compiler needs a profile with samples to read.

// errNoPGO reports that a binary rebuilt for -pgo does not say, in its
// build information, that it was built with a profile.
var errNoPGO = errors.New("built without a profile")

// rebuildWithProfiles is -pgo's step between building the binaries dirs
// in binDir and running jobs: for each binary it profiles one run of each
// of its jobs of the first round, merges the profiles and rebuilds the
// binary with them. It returns, for the report, each binary's profiled
// runs, as "sched: spawn/forget, skynet".
func rebuildWithProfiles(ctx context.Context, cfg config, root, binDir string, dirs []string, jobs []job, stderr io.Writer) ([]string, error) {
	var covered []string
	for _, dir := range dirs {
		profDir := filepath.Join(binDir, "pgo-"+dir)
		if err := os.MkdirAll(profDir, 0o755); err != nil {
			return nil, err
		}
		pcfg := cfg
		pcfg.cpuprofile, pcfg.memprofile, pcfg.trace = profDir, "", ""
		pcfg.scale = max(cfg.scale, 1)
		var runs []string
		for _, j := range jobs {
			if j.round != 1 || binaryFor(j.impl, j.workload) != dir {
				continue
			}
			fmt.Fprintf(stderr, "profiling %s: %s %s\n", dir, j.workload, j.label())
			if res, errText := execute(ctx, pcfg, binDir, j); !res.OK {
				return nil, fmt.Errorf("-pgo: the profiling run of %s on %s failed: %s\n%s", j.workload, j.label(), res.Error, errText)
			}
			run := j.workload
			if j.variant != "" {
				run += "/" + j.variant
			}
			runs = append(runs, run)
		}
		if len(runs) == 0 {
			continue // nothing of this binary's runs is selected
		}
		profile := filepath.Join(binDir, dir+".pgo")
		if err := mergeProfiles(ctx, profDir, profile); err != nil {
			return nil, err
		}
		if err := buildWithProfile(ctx, root, binDir, dir, profile, stderr); err != nil {
			return nil, err
		}
		covered = append(covered, dir+": "+strings.Join(runs, ", "))
	}
	return covered, nil
}

// mergeProfiles merges the CPU profiles in dir into one file, out, in
// the form the compiler's -pgo flag reads.
func mergeProfiles(ctx context.Context, dir, out string) error {
	files, err := filepath.Glob(filepath.Join(dir, "*.pprof"))
	if err != nil {
		return err
	}
	if len(files) == 0 {
		return fmt.Errorf("-pgo: no profile written in %s", dir)
	}
	args := append([]string{"tool", "pprof", "-proto"}, files...)
	cmd := exec.CommandContext(ctx, goTool(), args...)
	var merged, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &merged, &errOut
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("-pgo: go tool pprof -proto: %w\n%s", err, errOut.String())
	}
	return os.WriteFile(out, merged.Bytes(), 0o644)
}

// buildWithProfile rebuilds binary dir into binDir with the compiler's
// -pgo flag set to profile, and checks that the result says so.
func buildWithProfile(ctx context.Context, root, binDir, dir, profile string, stderr io.Writer) error {
	args := []string{"build", "-pgo=" + profile, "-o", binDir + string(filepath.Separator), "./impl/" + dir}
	fmt.Fprintf(stderr, "building %s with its profile\n", dir)
	if err := goBuild(ctx, root, args); err != nil {
		return err
	}
	return checkPGO(filepath.Join(binDir, dir))
}

// checkPGO returns nil if the binary at path was built with a profile,
// as its build information records, else an error wrapping errNoPGO.
func checkPGO(path string) error {
	info, err := buildinfo.ReadFile(path)
	if err != nil {
		return err
	}
	for _, s := range info.Settings {
		if s.Key == "-pgo" && s.Value != "" {
			return nil
		}
	}
	return fmt.Errorf("-pgo: %s: %w", path, errNoPGO)
}
