package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate/floodgate/internal/replay"
	"github.com/floodgate/floodgate/internal/settings"
	"github.com/floodgate/floodgate/pkg/rules"
)

// replayUsage is `floodgate replay -h`.
const replayUsage = `Usage: floodgate replay -old DIR -new DIR -traffic FILE... [-format text|json|html] [flags]

Replays recorded traffic through the rules in force (-old) and the edited
ones (-new), on the in-memory store with a virtual clock, and reports per
domain and per rule the requests allowed and denied under each, the
requests whose decision changes (with the first few), the descriptor
values (clients) by change in their denials, the busiest counters and, in
HTML, a chart of denials per minute. The report shows descriptor values as
recorded (addresses, API keys), to name whom an edit hits: keep it as
private as the traffic.

Traffic is JSON lines: floodgate's format, as -capture writes it,
  {"time": "2026-01-02T15:04:05.000000Z", "domain": "demo",
   "descriptors": [{"entries": [{"key": "api_key", "value": "alice"}]}]}
or Envoy's JSON access log in the format of examples/envoy-access-log.yaml.
An incomplete last line (no newline: a file copied while being written) is
skipped with a warning; a bad line elsewhere stops the replay.

-traffic may be given several times, or as a glob ('captures/*.jsonl'):
the files (one per replica, say) are merged by time. Each file is put back
in time order within -reorder requests read ahead; a request out of order
by more stops the replay with an error naming the file and line (a request
is never decided at another time than its own). Captures' times have a
fixed width, so their lines also sort as text: LC_ALL=C sort -o FILE FILE.

Exit codes: 0 the report was written; 1 the rules or the traffic cannot be
read, or the traffic is out of order; 2 a bad command line; 3 the report
was written but no request was replayed (an empty traffic file, or one with
only skipped lines), so its "no change" means nothing.

Flags:
`

// replayFlags are floodgate replay's command line.
type replayFlags struct {
	oldDir, newDir, format, output string
	traffic                        trafficFlag
	examples, top, values, reorder int
	merge                          bool
}

// trafficFlag is -traffic, which may be given several times.
type trafficFlag []string

func (t *trafficFlag) String() string { return strings.Join(*t, " ") }

func (t *trafficFlag) Set(s string) error {
	if s == "" {
		return errors.New("empty file name")
	}
	*t = append(*t, s)
	return nil
}

// parseReplayFlags reads floodgate replay's command line; flag.ErrHelp for
// -h, after printing the usage to stdout.
func parseReplayFlags(args []string, stdout io.Writer) (*replayFlags, error) {
	f := &replayFlags{}
	fs := flag.NewFlagSet("floodgate replay", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&f.oldDir, "old", "", "the rules in force: a rule file or directory")
	fs.StringVar(&f.newDir, "new", "", "the edited rules: a rule file or directory")
	fs.Var(&f.traffic, "traffic", "the recorded traffic: a JSON-lines `file` (- for stdin); several times, or a glob, for several files merged by time")
	fs.StringVar(&f.format, "format", "text", "report format: text, json or html")
	fs.StringVar(&f.output, "o", "", "write the report to this file instead of stdout")
	fs.IntVar(&f.examples, "examples", replay.DefaultExamples, "changed requests shown as examples")
	fs.IntVar(&f.values, "values", replay.DefaultValues, "descriptor values listed by change in denials")
	fs.IntVar(&f.top, "top", replay.DefaultTopCounters, "busiest counters listed")
	fs.IntVar(&f.reorder, "reorder", replay.DefaultReorder, "requests read ahead in each traffic file to put it in time order")
	fs.BoolVar(&f.merge, "merge-domains", false, "merge a domain declared in several files, as the server's -merge-domains")
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, replayUsage)
		fs.SetOutput(stdout)
		fs.PrintDefaults()
		return nil, err
	}
	if err == nil {
		err = f.check(fs)
	}
	return f, err
}

// replayCommand runs `floodgate replay args...` and returns the exit code
// replayUsage lists.
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
		hint := ""
		if errors.Is(err, replay.ErrOutOfOrder) {
			hint = "give each capture as its own -traffic, since they are merged by time; sort the file: a capture's lines sort as text, LC_ALL=C sort -o FILE FILE; or raise -reorder"
		}
		out.fatal(err, hint)
		return 1
	}
	for _, in := range rep.Traffic {
		if in.Truncated > 0 {
			out.logger.Warn("the last line of the traffic has no newline and is not JSON (a file copied while being written?): skipped", "traffic", in.Name)
		}
	}
	if rep.Requests == 0 {
		out.logger.Warn("no request replayed: the traffic holds none, so the report compares nothing", "traffic", f.traffic.String(),
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
	inputs, closeAll, err := openTraffic(f.traffic)
	if err != nil {
		return nil, err
	}
	defer closeAll()
	// 0 would be the package's default: -examples 0 and -values 0 mean none.
	none := func(n int) int {
		if n == 0 {
			return -1
		}
		return n
	}
	return replay.Run(ctx, oldSet, newSet, replay.Merge(f.reorder, inputs...), replay.Options{
		Examples: none(f.examples), Values: none(f.values), TopCounters: f.top, OldName: f.oldDir, NewName: f.newDir,
	})
}

// openTraffic opens the -traffic files, globs expanded, each once ("-" is
// stdin), and returns them with a function that closes them.
func openTraffic(args []string) ([]replay.Input, func(), error) {
	var inputs []replay.Input
	var files []*os.File
	closeAll := func() {
		for _, f := range files {
			f.Close()
		}
	}
	seen := map[string]bool{}
	for _, arg := range args {
		names := []string{arg}
		if arg != "-" && strings.ContainsAny(arg, "*?[") {
			m, err := filepath.Glob(arg)
			if err == nil && len(m) == 0 {
				err = errors.New("matches no file")
			}
			if err != nil {
				closeAll()
				return nil, nil, fmt.Errorf("replay: -traffic %s: %w", arg, err)
			}
			names = m
		}
		for _, name := range names {
			if seen[filepath.Clean(name)] {
				closeAll()
				return nil, nil, fmt.Errorf("replay: -traffic %s: given twice (its requests would be replayed twice)", name)
			}
			seen[filepath.Clean(name)] = true
			if name == "-" {
				inputs = append(inputs, replay.Input{Name: "stdin", Reader: replay.NewReader(os.Stdin)})
				continue
			}
			file, err := os.Open(name)
			if err != nil {
				closeAll()
				return nil, nil, fmt.Errorf("replay: -traffic: %w", err)
			}
			files = append(files, file)
			inputs = append(inputs, replay.Input{Name: name, Reader: replay.NewReader(file)})
		}
	}
	return inputs, closeAll, nil
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

// check refuses a replay command line that cannot work.
func (f *replayFlags) check(fs *flag.FlagSet) error {
	switch {
	case fs.NArg() > 0:
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	case f.oldDir == "" || f.newDir == "" || len(f.traffic) == 0:
		return errors.New("-old, -new and -traffic are required")
	case f.format != "text" && f.format != "json" && f.format != "html":
		return fmt.Errorf("-format %q: want text, json or html", f.format)
	case f.examples < 0 || f.top < 0 || f.values < 0:
		return errors.New("-examples, -values and -top must not be negative")
	case f.reorder < 1:
		return fmt.Errorf("-reorder %d: want at least 1 (1 refuses any disorder)", f.reorder)
	}
	return nil
}

// withCapture wraps svc in a replay.Capture when -capture is set, with its
// counts in reg, and returns what to serve and what stops the recording.
func withCapture(svc pb.RateLimitServiceServer, cfg *settings.Capture, reg prometheus.Registerer, logger *slog.Logger) (pb.RateLimitServiceServer, func(), error) {
	if cfg.Path == "" {
		return svc, func() {}, nil
	}
	opts := cfg.Options
	opts.Logger = logger
	c, err := replay.NewCapture(svc, cfg.Path, opts)
	if err != nil {
		return nil, nil, settings.FlagError("capture", err)
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
