package replay

import (
	"cmp"
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

	"github.com/floodgate/floodgate/pkg/rules"
)

// usage is `floodgate replay -h`.
const usage = `Usage: floodgate replay -old DIR -new DIR -traffic FILE... [-format text|json|html] [flags]

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
read, the traffic is out of order, or the replay was interrupted (SIGINT or
SIGTERM) before its end; 2 a bad command line; 3 the report was written but
no request was replayed (an empty traffic file, or one with only skipped
lines) or decided (every one refused as invalid), so its "no change" means
nothing.

Flags:
`

// commandFlags are floodgate replay's command line.
type commandFlags struct {
	oldDir, newDir, format, output string
	traffic                        []string // -traffic, which may be given several times
	examples, top, values, reorder int
	merge                          bool
}

// parseFlags reads floodgate replay's command line; flag.ErrHelp for
// -h, after printing the usage to stdout.
func parseFlags(args []string, stdout io.Writer) (*commandFlags, error) {
	f := &commandFlags{}
	fs := flag.NewFlagSet("floodgate replay", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&f.oldDir, "old", "", "the rules in force: a rule file or directory")
	fs.StringVar(&f.newDir, "new", "", "the edited rules: a rule file or directory")
	fs.Func("traffic", "the recorded traffic: a JSON-lines `file` (- for stdin); several times, or a glob, for several files merged by time",
		func(s string) error {
			if s == "" {
				return errors.New("empty file name")
			}
			f.traffic = append(f.traffic, s)
			return nil
		})
	fs.StringVar(&f.format, "format", "text", "report format: text, json or html")
	fs.StringVar(&f.output, "o", "", "write the report to this file instead of stdout")
	fs.IntVar(&f.examples, "examples", defaultExamples, "changed requests shown as examples")
	fs.IntVar(&f.values, "values", defaultValues, "descriptor values listed by change in denials")
	fs.IntVar(&f.top, "top", defaultTopCounters, "busiest counters listed")
	fs.IntVar(&f.reorder, "reorder", defaultReorder, "requests read ahead in each traffic file to put it in time order")
	fs.BoolVar(&f.merge, "merge-domains", false, "merge a domain declared in several files, as the server's -merge-domains")
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, usage)
		fs.SetOutput(stdout)
		fs.PrintDefaults()
		return nil, err
	}
	if err == nil {
		err = f.check(fs)
	}
	return f, err
}

// Command runs `floodgate replay args...` and returns the exit code the
// usage lists, with the error to report when it is 1 or 2. logger gets
// the warnings and the closing line; -h prints the usage to stdout.
func Command(ctx context.Context, args []string, stdout io.Writer, logger *slog.Logger) (int, error) {
	f, err := parseFlags(args, stdout)
	if errors.Is(err, flag.ErrHelp) {
		return 0, nil
	}
	if err != nil {
		return 2, fmt.Errorf("replay: %w (run floodgate replay -h for the flags)", err)
	}
	start := time.Now()
	rep, err := f.run(ctx)
	if err == nil {
		err = f.write(rep, stdout)
	}
	if errors.Is(err, context.Canceled) {
		err = fmt.Errorf("replay: interrupted before the end of the traffic, no report: %w", err)
	}
	if errors.Is(err, ErrOutOfOrder) {
		err = fmt.Errorf("%w (give each capture as its own -traffic, since they are merged by time; "+
			"sort the file: a capture's lines sort as text, LC_ALL=C sort -o FILE FILE; or raise -reorder)", err)
	}
	if err != nil {
		return 1, err
	}
	for _, in := range rep.Traffic {
		if in.Truncated > 0 {
			logger.Warn("the last line of the traffic has no newline and is not JSON (a file copied while being written?): skipped", "traffic", in.Name)
		}
	}
	if rep.Requests == 0 {
		logger.Warn("no request replayed: the traffic holds none, so the report compares nothing", "traffic", strings.Join(f.traffic, " "),
			"skipped", rep.Skipped, "exit_code", exitNothingReplayed)
		return exitNothingReplayed, nil
	}
	if rep.Old.Invalid == rep.Requests && rep.New.Invalid == rep.Requests {
		logger.Warn("no request decided: every one was refused as invalid, under both rule sets, so the report compares nothing", "traffic", strings.Join(f.traffic, " "),
			"invalid", rep.Requests, "exit_code", exitNothingReplayed)
		return exitNothingReplayed, nil
	}
	logger.Info("replayed", "requests", rep.Requests, "took", time.Since(start).Round(time.Millisecond).String())
	return 0, nil
}

// run loads both rule sets and replays the traffic through them.
func (f *commandFlags) run(ctx context.Context) (*Report, error) {
	opts := rules.Options{MergeDomains: f.merge}
	oldSet, err := rules.Load(f.oldDir, opts)
	if err != nil {
		return nil, fmt.Errorf("replay: cannot load the rules in %s (-old):\n%w", f.oldDir, err)
	}
	newSet, err := rules.Load(f.newDir, opts)
	if err != nil {
		return nil, fmt.Errorf("replay: cannot load the rules in %s (-new):\n%w", f.newDir, err)
	}
	inputs, files, err := openTraffic(f.traffic)
	for _, file := range files {
		defer file.Close()
	}
	if err != nil {
		return nil, err
	}
	// 0 would be the package's default: -examples 0 and -values 0 mean none.
	return Run(ctx, oldSet, newSet, Merge(f.reorder, inputs...), Options{
		Examples: cmp.Or(f.examples, -1), Values: cmp.Or(f.values, -1), TopCounters: f.top, OldName: f.oldDir, NewName: f.newDir,
	})
}

// openTraffic opens the -traffic files, globs expanded, each once ("-" is
// stdin), and returns them with the files to close, also on an error.
func openTraffic(args []string) ([]Input, []*os.File, error) {
	var inputs []Input
	var files []*os.File
	seen := map[string]bool{}
	for _, arg := range args {
		names := []string{arg}
		if arg != "-" && strings.ContainsAny(arg, "*?[") {
			var err error
			if names, err = filepath.Glob(arg); err == nil && len(names) == 0 {
				err = errors.New("matches no file")
			}
			if err != nil {
				return nil, files, fmt.Errorf("replay: -traffic %s: %w", arg, err)
			}
		}
		for _, name := range names {
			if seen[filepath.Clean(name)] {
				return nil, files, fmt.Errorf("replay: -traffic %s: given twice (its requests would be replayed twice)", name)
			}
			seen[filepath.Clean(name)] = true
			if name == "-" {
				inputs = append(inputs, Input{Name: "stdin", Reader: NewReader(os.Stdin)})
				continue
			}
			file, err := os.Open(name)
			if err != nil {
				return nil, files, fmt.Errorf("replay: -traffic: %w", err)
			}
			files = append(files, file)
			inputs = append(inputs, Input{Name: name, Reader: NewReader(file)})
		}
	}
	return inputs, files, nil
}

// write writes the report in -format to -o, or to stdout.
func (f *commandFlags) write(rep *Report, stdout io.Writer) error {
	w := stdout
	if f.output != "" {
		file, err := os.Create(f.output)
		if err != nil {
			return fmt.Errorf("replay: -o: %w", err)
		}
		defer file.Close()
		w = file
	}
	if err := formats[f.format](rep, w); err != nil {
		return fmt.Errorf("replay: writing the report: %w", err)
	}
	return nil
}

// formats are the report's writers, by -format.
var formats = map[string]func(*Report, io.Writer) error{
	"text": (*Report).WriteText, "json": (*Report).WriteJSON, "html": (*Report).WriteHTML,
}

// exitNothingReplayed is the exit code of a replay that read no request.
const exitNothingReplayed = 3

// check refuses a replay command line that cannot work.
func (f *commandFlags) check(fs *flag.FlagSet) error {
	switch {
	case fs.NArg() > 0:
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	case f.oldDir == "" || f.newDir == "" || len(f.traffic) == 0:
		return errors.New("-old, -new and -traffic are required")
	case formats[f.format] == nil:
		return fmt.Errorf("-format %q: want text, json or html", f.format)
	case f.examples < 0 || f.top < 0 || f.values < 0:
		return errors.New("-examples, -values and -top must not be negative")
	case f.reorder < 1:
		return fmt.Errorf("-reorder %d: want at least 1 (1 refuses any disorder)", f.reorder)
	}
	return nil
}
