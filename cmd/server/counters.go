package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/floodgate/floodgate/internal/counters"
	"github.com/floodgate/floodgate/internal/server"
	"github.com/floodgate/floodgate/internal/settings"
)

// countersUsage is `floodgate counters -h`.
const countersUsage = `Usage: floodgate counters get|reset [flags] domain key=value [key=value...]

get shows, for a domain and a descriptor (its entries in the order Envoy
sends them), every limit that applies, with its counter's used, remaining
and reset; reset deletes those counters, so that the client is let through
again at once, and shows them after. Both ask a running server's debug
listener (GET /counters, POST /counters/reset), which is on loopback by
default; the public HTTP listener refuses them. The server logs every reset
with the address it came from and counts it in
floodgate_counter_resets_total.

  floodgate counters get demo api_key=alice
  floodgate counters reset -addr 10.0.0.5:6070 demo remote_address=198.51.100.23

-addr defaults to the debug listener this environment gives the server
(FLOODGATE_DEBUG_ADDR, DEBUG_HOST and DEBUG_PORT, else 127.0.0.1:6070).

Exit codes: 0 the counters were shown or reset; 1 the server could not be
asked or failed (unreachable, refused, the store down); 2 a bad command
line; 3 no limit with a counter applies to the descriptor (no rule matches,
or only unlimited limits), so nothing was shown or reset.

Flags:
`

// exitNoCounter is the exit code of `floodgate counters` when no limit
// with a counter applies: a typo in the descriptor must not read as done.
const exitNoCounter = 3

// countersFlags are floodgate counters' command line.
type countersFlags struct {
	verb, addr, domain string
	entries            []string
	json               bool
	timeout            time.Duration
}

// parseCountersFlags reads `floodgate counters args...`: the verb, then
// flags (also accepted before the verb), the domain and the entries.
// flag.ErrHelp for -h, after printing the usage to stdout.
func parseCountersFlags(args []string, env lookupFunc, stdout io.Writer) (*countersFlags, error) {
	f := &countersFlags{}
	fs := flag.NewFlagSet("floodgate counters", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	def := defaultDebugAddr(env)
	fs.StringVar(&f.addr, "addr", def, "the server's debug listener, host:port or http://host:port")
	fs.StringVar(&f.addr, "debug-addr", def, "the same as -addr, as the server's flag names it")
	fs.BoolVar(&f.json, "json", false, "print the server's JSON answer instead of a table")
	fs.DurationVar(&f.timeout, "timeout", 10*time.Second, "longest wait for the server's answer")
	err := fs.Parse(args)
	if err == nil && fs.NArg() > 0 {
		// Flags may follow the verb as well.
		f.verb = fs.Arg(0)
		err = fs.Parse(fs.Args()[1:])
	}
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, countersUsage)
		fs.SetOutput(stdout)
		fs.PrintDefaults()
		return nil, err
	}
	if err != nil {
		return nil, err
	}
	rest := fs.Args()
	switch {
	case f.verb != "get" && f.verb != "reset":
		return nil, fmt.Errorf("want get or reset, then a domain and key=value entries, got %q", f.verb)
	case len(rest) < 2:
		return nil, fmt.Errorf("%s needs a domain and at least one key=value entry", f.verb)
	case f.addr == "":
		return nil, errors.New("the debug listener is off in this environment (-debug-addr, DEBUG_HOST/DEBUG_PORT): give the server's with -addr")
	case f.timeout <= 0:
		return nil, fmt.Errorf("-timeout %v: must be positive", f.timeout)
	}
	f.domain, f.entries = rest[0], rest[1:]
	for _, e := range f.entries {
		if k, _, ok := strings.Cut(e, "="); !ok || k == "" {
			return nil, fmt.Errorf("entry %q: want key=value", e)
		}
	}
	return f, nil
}

// defaultDebugAddr is where the server's debug listener is with this
// environment, as an address to dial (":6070" is loopback's); the
// listener's default when the server would refuse the environment.
func defaultDebugAddr(env lookupFunc) string {
	addr := server.DefaultDebugAddr
	if cfg, err := settings.Load(nil, env); err == nil {
		addr = cfg.Server.DebugAddr
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	switch ip := net.ParseIP(host); {
	case host == "" || ip != nil && ip.To4() != nil && ip.IsUnspecified():
		host = "127.0.0.1"
	case ip != nil && ip.IsUnspecified():
		host = "::1"
	}
	return net.JoinHostPort(host, port)
}

// countersCommand runs `floodgate counters args...` and returns the exit
// code (see countersUsage).
func countersCommand(ctx context.Context, args []string, env lookupFunc, stdout, stderr io.Writer) int {
	out := newLogOutput(stderr, "text", slog.LevelInfo, &redactor{})
	f, err := parseCountersFlags(args, env, stdout)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		out.fatal(fmt.Errorf("counters: %w", err), "run floodgate counters -h for the flags")
		return 2
	}
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	ans, raw, err := f.ask(ctx)
	if err != nil {
		out.fatal(fmt.Errorf("counters %s: %w", f.verb, err), "")
		return 1
	}
	if f.json {
		stdout.Write(raw)
	} else {
		printCounters(stdout, ans)
	}
	if !anyCounted(ans) {
		return exitNoCounter
	}
	return 0
}

// ask sends the request to the debug listener and returns its answer,
// decoded and as sent.
func (f *countersFlags) ask(ctx context.Context) (*counters.Answer, []byte, error) {
	base := f.addr
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	path, method := counters.Path, http.MethodGet
	if f.verb == "reset" {
		path, method = counters.ResetPath, http.MethodPost
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimSuffix(base, "/")+path+"?"+f.query(), nil)
	if err != nil {
		return nil, nil, err
	}
	req.Header.Set("User-Agent", "floodgate-counters")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, nil, fmt.Errorf("asking the debug listener %s (-addr): %w", f.addr, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, nil, fmt.Errorf("reading the answer of %s: %w", f.addr, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, nil, fmt.Errorf("%s answered %s: %s", f.addr, resp.Status, errorText(raw))
	}
	var ans counters.Answer
	if err := json.Unmarshal(raw, &ans); err != nil {
		return nil, nil, fmt.Errorf("%s answered what is not a counters answer (is it the debug listener?): %w", f.addr, err)
	}
	return &ans, raw, nil
}

// query is the endpoints' query for the domain and entries, in order.
func (f *countersFlags) query() string {
	parts := []string{"domain=" + url.QueryEscape(f.domain)}
	for _, e := range f.entries {
		k, v, _ := strings.Cut(e, "=")
		parts = append(parts, url.QueryEscape(k)+"="+url.QueryEscape(v))
	}
	return strings.Join(parts, "&")
}

// errorText is the message of an error answer: its "error" field when it
// is JSON, else its text.
func errorText(body []byte) string {
	var e struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(body, &e) == nil && e.Error != "" {
		return e.Error
	}
	return strings.TrimSpace(string(body))
}

// anyCounted reports whether a limit of the answer has a counter.
func anyCounted(a *counters.Answer) bool {
	for _, c := range a.Limits {
		if c.Counted {
			return true
		}
	}
	return false
}

// printCounters writes the answer for people: the descriptor and what
// applies, then one row per limit.
func printCounters(w io.Writer, a *counters.Answer) {
	entries := make([]string, len(a.Descriptor))
	for i, e := range a.Descriptor {
		entries[i] = e.Key + "=" + e.Value
	}
	fmt.Fprintf(w, "%s %s: %s\n", a.Domain, strings.Join(entries, " "), a.Reason)
	if len(a.Limits) == 0 {
		return
	}
	if a.Reset {
		fmt.Fprintf(w, "reset: the counters below were deleted; USED is what they hold now, BEFORE what they held\n")
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	head := "RULE\tLIMIT\tMODE\tUSED\tREMAINING\tRESET IN\t"
	if a.Reset {
		head += "BEFORE\t"
	}
	fmt.Fprintln(tw, head+"COUNTER")
	for _, c := range a.Limits {
		row := []string{c.Rule, c.Limit, c.Mode, "-", "-", "-"}
		if c.Counted {
			row[3] = fmt.Sprintf("%d/%d", c.Used, c.Capacity)
			row[4] = strconv.FormatInt(c.Remaining, 10)
			row[5] = resetIn(c.ResetSeconds)
		}
		if a.Reset {
			before := "-"
			if c.UsedBefore != nil {
				before = strconv.FormatInt(*c.UsedBefore, 10)
			}
			row = append(row, before)
		}
		key := c.Note
		if c.Counted {
			key = strconv.Quote(c.Key)
		}
		fmt.Fprintln(tw, strings.Join(append(row, key), "\t"))
	}
	tw.Flush()
}

// resetIn rounds a counter's time to reset to the millisecond under a
// minute ("1.553s"), to the second above ("24h29m1s").
func resetIn(seconds float64) string {
	d := time.Duration(seconds * float64(time.Second))
	if d >= time.Minute {
		return d.Round(time.Second).String()
	}
	return d.Round(time.Millisecond).String()
}
