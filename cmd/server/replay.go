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

	"github.com/floodgate/floodgate/pkg/replay"
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

// replayCommand runs `floodgate replay args...` and returns the exit code:
// 0 when the report was written, 1 when the rules or the traffic cannot be
// read, 2 for a bad command line, 3 when the report was written but no
// request was replayed: a CI gate reading "no change" from an empty
// traffic file would pass an edit it never tested.
func replayCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	out := newLogOutput(stderr, "text", slog.LevelInfo, &redactor{})
	fs := flag.NewFlagSet("floodgate replay", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	oldDir := fs.String("old", "", "the rules in force: a rule file or directory")
	newDir := fs.String("new", "", "the edited rules: a rule file or directory")
	traffic := fs.String("traffic", "", "the recorded traffic, JSON lines (- for stdin)")
	format := fs.String("format", "text", "report format: text, json or html")
	output := fs.String("o", "", "write the report to this file instead of stdout")
	examples := fs.Int("examples", replay.DefaultExamples, "changed requests shown as examples")
	top := fs.Int("top", replay.DefaultTopCounters, "busiest counters listed")
	merge := fs.Bool("merge-domains", false, "merge a domain declared in several files, as the server's -merge-domains")
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, replayUsage)
		fs.SetOutput(stdout)
		fs.PrintDefaults()
		return 0
	}
	const hint = "run floodgate replay -h for the flags"
	if err == nil {
		err = checkReplayFlags(fs, *oldDir, *newDir, *traffic, *format, *examples, *top)
	}
	if err != nil {
		out.fatal(fmt.Errorf("replay: %w", err), hint)
		return 2
	}

	opts := rules.Options{MergeDomains: *merge}
	oldSet, err := rules.Load(*oldDir, opts)
	if err != nil {
		out.fatal(fmt.Errorf("replay: cannot load the rules in %s (-old):\n%w", *oldDir, err), "")
		return 1
	}
	newSet, err := rules.Load(*newDir, opts)
	if err != nil {
		out.fatal(fmt.Errorf("replay: cannot load the rules in %s (-new):\n%w", *newDir, err), "")
		return 1
	}
	in := io.Reader(os.Stdin)
	if *traffic != "-" {
		f, err := os.Open(*traffic)
		if err != nil {
			out.fatal(fmt.Errorf("replay: -traffic: %w", err), "")
			return 1
		}
		defer f.Close()
		in = f
	}
	if *examples == 0 {
		*examples = -1 // none; 0 would be the package's default
	}
	start := time.Now()
	rep, err := replay.Run(ctx, oldSet, newSet, replay.NewReader(in), replay.Options{
		Examples: *examples, TopCounters: *top, OldName: *oldDir, NewName: *newDir,
	})
	if err != nil {
		out.fatal(fmt.Errorf("%s: %w", *traffic, err), "")
		return 1
	}
	w := stdout
	if *output != "" {
		f, err := os.Create(*output)
		if err != nil {
			out.fatal(fmt.Errorf("replay: -o: %w", err), "")
			return 1
		}
		defer f.Close()
		w = f
	}
	switch *format {
	case "json":
		err = rep.WriteJSON(w)
	case "html":
		err = rep.WriteHTML(w)
	default:
		err = rep.WriteText(w)
	}
	if err != nil {
		out.fatal(fmt.Errorf("replay: writing the report: %w", err), "")
		return 1
	}
	if rep.Truncated > 0 {
		out.logger.Warn("the last line of the traffic has no newline and is not JSON (a file copied while being written?): skipped", "traffic", *traffic)
	}
	if rep.Requests == 0 {
		out.logger.Warn("no request replayed: the traffic holds none, so the report compares nothing", "traffic", *traffic,
			"skipped", rep.Skipped, "exit_code", exitNothingReplayed)
		return exitNothingReplayed
	}
	out.logger.Info("replayed", "requests", rep.Requests, "took", time.Since(start).Round(time.Millisecond).String())
	return 0
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
func withCapture(svc pb.RateLimitServiceServer, cfg *config, reg prometheus.Registerer, logger *slog.Logger) (pb.RateLimitServiceServer, func(), error) {
	if cfg.capture == "" {
		return svc, func() {}, nil
	}
	c, err := replay.NewCapture(svc, cfg.capture, replay.CaptureOptions{
		Sample: cfg.captureSample, MaxBytes: cfg.captureMaxBytes, Logger: logger,
	})
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
	logger.Info("recording requests for floodgate replay", "capture", cfg.capture, "sample", cfg.captureSample, "max_bytes", cfg.captureMaxBytes)
	return c, func() {
		if err := c.Close(); err != nil {
			logger.Error("capture: closing the file", "capture", cfg.capture, "err", err)
		}
		st := c.Stats()
		logger.Info("capture stopped", "capture", cfg.capture, "written", st.Written, "dropped", st.Dropped, "over_size", st.OverSize)
	}, nil
}
