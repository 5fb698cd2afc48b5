package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate/floodgate/internal/replay"
	"github.com/floodgate/floodgate/internal/settings"
	"github.com/floodgate/floodgate/pkg/rules"
)

// replayUsage is `floodgate replay -h`.
const replayUsage = `Usage: floodgate replay -old DIR -new DIR -traffic FILE [-format text|json|html] [flags]

Replays recorded traffic through the rules in force (-old) and the edited
ones (-new), on the in-memory store with a virtual clock, and reports per
domain and per rule the requests allowed and denied under each, the
requests whose decision changes (with the first few), the busiest counters
and, in HTML, a chart of denials per minute.

Traffic is JSON lines: floodgate's format, as -capture writes it,
  {"time": "2026-01-02T15:04:05Z", "domain": "demo",
   "descriptors": [{"entries": [{"key": "api_key", "value": "alice"}]}]}
or Envoy's JSON access log in the format of examples/envoy-access-log.yaml.
An incomplete last line (no newline: a file copied while being written) is
skipped with a warning; a bad line elsewhere stops the replay.

Exit codes: 0 the report was written; 1 the rules or the traffic cannot be
read; 2 a bad command line; 3 the report was written but no request was
replayed (an empty traffic file, or one with only skipped lines), so its
"no change" means nothing.

Flags:
`

// replayFlags are floodgate replay's command line.
type replayFlags struct {
	oldDir, newDir, traffic, format, output string
	examples, top                           int
	merge                                   bool
}

// parseReplayFlags reads floodgate replay's command line; flag.ErrHelp for
// -h, after printing the usage to stdout.
func parseReplayFlags(args []string, stdout io.Writer) (*replayFlags, error) {
	f := &replayFlags{}
	fs := flag.NewFlagSet("floodgate replay", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&f.oldDir, "old", "", "the rules in force: a rule file or directory")
	fs.StringVar(&f.newDir, "new", "", "the edited rules: a rule file or directory")
	fs.StringVar(&f.traffic, "traffic", "", "the recorded traffic, JSON lines (- for stdin)")
	fs.StringVar(&f.format, "format", "text", "report format: text, json or html")
	fs.StringVar(&f.output, "o", "", "write the report to this file instead of stdout")
	fs.IntVar(&f.examples, "examples", replay.DefaultExamples, "changed requests shown as examples")
	fs.IntVar(&f.top, "top", replay.DefaultTopCounters, "busiest counters listed")
	fs.BoolVar(&f.merge, "merge-domains", false, "merge a domain declared in several files, as the server's -merge-domains")
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, replayUsage)
		fs.SetOutput(stdout)
		fs.PrintDefaults()
		return nil, err
	}
	if err == nil {
		err = checkReplayFlags(fs, f.oldDir, f.newDir, f.traffic, f.format, f.examples, f.top)
	}
	return f, err
}

// replayCommand runs `floodgate replay args...` and returns the exit code:
// 0 when the report was written, 1 when the rules or the traffic cannot be
// read, 2 for a bad command line, 3 when the report was written but no
// request was replayed: a CI gate reading "no change" from an empty
// traffic file would pass an edit it never tested.
func replayCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	out := newLogOutput(stderr, "text", slog.LevelInfo, &redactor{})
	f, err := parseReplayFlags(args, stdout)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		out.fatal(fmt.Errorf("replay: %w", err), "run floodgate replay -h for the flags")
		return 2
	}
	start := time.Now()
	rep, err := f.run(ctx)
	if err == nil {
		err = f.write(rep, stdout)
	}
	if err != nil {
		out.fatal(err, "")
		return 1
	}
	if rep.Truncated > 0 {
		out.logger.Warn("the last line of the traffic has no newline and is not JSON (a file copied while being written?): skipped", "traffic", f.traffic)
	}
	if rep.Requests == 0 {
		out.logger.Warn("no request replayed: the traffic holds none, so the report compares nothing", "traffic", f.traffic,
			"skipped", rep.Skipped, "exit_code", exitNothingReplayed)
		return exitNothingReplayed
	}
	out.logger.Info("replayed", "requests", rep.Requests, "took", time.Since(start).Round(time.Millisecond).String())
	return 0
}

// run loads both rule sets and replays the traffic through them.
func (f *replayFlags) run(ctx context.Context) (*replay.Report, error) {
	opts := rules.Options{MergeDomains: f.merge}
	oldSet, err := rules.Load(f.oldDir, opts)
	if err != nil {
		return nil, fmt.Errorf("replay: cannot load the rules in %s (-old):\n%w", f.oldDir, err)
	}
	newSet, err := rules.Load(f.newDir, opts)
	if err != nil {
		return nil, fmt.Errorf("replay: cannot load the rules in %s (-new):\n%w", f.newDir, err)
	}
	in := io.Reader(os.Stdin)
	if f.traffic != "-" {
		file, err := os.Open(f.traffic)
		if err != nil {
			return nil, fmt.Errorf("replay: -traffic: %w", err)
		}
		defer file.Close()
		in = file
	}
	examples := f.examples
	if examples == 0 {
		examples = -1 // none; 0 would be the package's default
	}
	rep, err := replay.Run(ctx, oldSet, newSet, replay.NewReader(in), replay.Options{
		Examples: examples, TopCounters: f.top, OldName: f.oldDir, NewName: f.newDir,
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", f.traffic, err)
	}
	return rep, nil
}

// write writes the report in -format to -o, or to stdout.
func (f *replayFlags) write(rep *replay.Report, stdout io.Writer) error {
	w := stdout
	if f.output != "" {
		file, err := os.Create(f.output)
		if err != nil {
			return fmt.Errorf("replay: -o: %w", err)
		}
		defer file.Close()
		w = file
	}
	var err error
	switch f.format {
	case "json":
		err = rep.WriteJSON(w)
	case "html":
		err = rep.WriteHTML(w)
	default:
		err = rep.WriteText(w)
	}
	if err != nil {
		return fmt.Errorf("replay: writing the report: %w", err)
	}
	return nil
}

// exitNothingReplayed is the exit code of a replay that read no request.
const exitNothingReplayed = 3

// checkReplayFlags refuses a replay command line that cannot work.
func checkReplayFlags(fs *flag.FlagSet, oldDir, newDir, traffic, format string, examples, top int) error {
	switch {
	case fs.NArg() > 0:
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	case oldDir == "" || newDir == "" || traffic == "":
		return errors.New("-old, -new and -traffic are required")
	case format != "text" && format != "json" && format != "html":
		return fmt.Errorf("-format %q: want text, json or html", format)
	case examples < 0 || top < 0:
		return errors.New("-examples and -top must not be negative")
	}
	return nil
}

// withCapture wraps svc in a replay.Capture when -capture is set, with its
// counts in reg, and returns what the server should serve and a function
// that stops recording (a no-op without -capture).
func withCapture(svc pb.RateLimitServiceServer, cfg *settings.Capture, reg prometheus.Registerer, logger *slog.Logger) (pb.RateLimitServiceServer, func(), error) {
	if cfg.Path == "" {
		return svc, func() {}, nil
	}
	opts := cfg.Options
	opts.Logger = logger
	c, err := replay.NewCapture(svc, cfg.Path, opts)
	if err != nil {
		return nil, nil, fmt.Errorf("-capture: %w", err)
	}
	for _, o := range []struct {
		outcome string
		count   func(replay.CaptureStats) int64
	}{
		{"written", func(s replay.CaptureStats) int64 { return s.Written }},
		{"dropped", func(s replay.CaptureStats) int64 { return s.Dropped }},
		{"over_size", func(s replay.CaptureStats) int64 { return s.OverSize }},
	} {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Namespace: "floodgate", Name: "capture_lines_total",
			Help:        "Requests recorded by -capture (written), not recorded because the writer was behind (dropped) or the file full (over_size).",
			ConstLabels: prometheus.Labels{"outcome": o.outcome},
		}, func() float64 { return float64(o.count(c.Stats())) }))
	}
	logger.Info("recording requests for floodgate replay", "capture", cfg.Path, "sample", opts.Sample, "max_bytes", opts.MaxBytes)
	return c, func() {
		if err := c.Close(); err != nil {
			logger.Error("capture: closing the file", "capture", cfg.Path, "err", err)
		}
		st := c.Stats()
		logger.Info("capture stopped", "capture", cfg.Path, "written", st.Written, "dropped", st.Dropped, "over_size", st.OverSize)
	}, nil
}
