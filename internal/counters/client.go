package counters

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// usage is `floodgate counters -h`.
const usage = `Usage: floodgate counters get|reset [flags] domain key=value [key=value...]

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

// exitNoCounter is the exit code when no limit with a counter applies: a
// typo in the descriptor must not read as done.
const exitNoCounter = 3

// command is floodgate counters' command line.
type command struct {
	verb, addr, domain string
	entries            []Entry
	json               bool
	timeout            time.Duration
}

// Command runs `floodgate counters args...`, the client of a running
// server's Handler, and returns the exit code the usage lists, with the
// error to report when it is 1 or 2. addr is -addr's default: the
// server's debug listener. -h prints the usage to stdout.
func Command(ctx context.Context, args []string, addr string, stdout io.Writer) (int, error) {
	c, err := parseCommand(args, addr, stdout)
	if errors.Is(err, flag.ErrHelp) {
		return 0, nil
	}
	if err != nil {
		return 2, fmt.Errorf("counters: %w (run floodgate counters -h for the flags)", err)
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	ans, raw, err := c.ask(ctx)
	if err != nil {
		return 1, fmt.Errorf("counters %s: %w", c.verb, err)
	}
	if c.json {
		stdout.Write(raw)
	} else {
		printAnswer(stdout, ans)
	}
	if !slices.ContainsFunc(ans.Limits, func(l Counter) bool { return l.Counted }) {
		return exitNoCounter, nil
	}
	return 0, nil
}

// parseCommand reads the verb, then flags (also accepted before the
// verb), the domain and the entries; flag.ErrHelp for -h, after printing
// the usage to stdout.
func parseCommand(args []string, addr string, stdout io.Writer) (*command, error) {
	c := &command{}
	fs := flag.NewFlagSet("floodgate counters", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&c.addr, "addr", addr, "the server's debug listener, host:port or http://host:port")
	fs.StringVar(&c.addr, "debug-addr", addr, "the same as -addr, as the server's flag names it")
	fs.BoolVar(&c.json, "json", false, "print the server's JSON answer instead of a table")
	fs.DurationVar(&c.timeout, "timeout", 10*time.Second, "longest wait for the server's answer")
	err := fs.Parse(args)
	if err == nil && fs.NArg() > 0 {
		c.verb = fs.Arg(0)
		err = fs.Parse(fs.Args()[1:])
	}
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, usage)
		fs.SetOutput(stdout)
		fs.PrintDefaults()
	}
	if err != nil {
		return nil, err
	}
	rest := fs.Args()
	switch {
	case c.verb != "get" && c.verb != "reset":
		return nil, fmt.Errorf("want get or reset, then a domain and key=value entries, got %q", c.verb)
	case len(rest) < 2:
		return nil, fmt.Errorf("%s needs a domain and at least one key=value entry", c.verb)
	case c.addr == "":
		return nil, errors.New("the debug listener is off in this environment (-debug-addr, DEBUG_HOST/DEBUG_PORT): give the server's with -addr")
	case c.timeout <= 0:
		return nil, fmt.Errorf("-timeout %v: must be positive", c.timeout)
	}
	c.domain = rest[0]
	for _, e := range rest[1:] {
		k, v, ok := strings.Cut(e, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("entry %q: want key=value", e)
		}
		c.entries = append(c.entries, Entry{Key: k, Value: v})
	}
	return c, nil
}

// ask sends the request to the debug listener and returns its answer,
// decoded and as sent.
func (c *command) ask(ctx context.Context) (*Answer, []byte, error) {
	base := c.addr
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	path, method := Path, http.MethodGet
	if c.verb == "reset" {
		path, method = ResetPath, http.MethodPost
	}
	url := strings.TrimSuffix(base, "/") + path + "?" + query(c.domain, c.entries)
	req, err := http.NewRequestWithContext(ctx, method, url, nil)
	if err != nil {
		return nil, nil, err
	}
	req.Header.Set("User-Agent", "floodgate-counters")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, nil, fmt.Errorf("asking the debug listener %s (-addr): %w", c.addr, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, nil, fmt.Errorf("reading the answer of %s: %w", c.addr, err)
	}
	if resp.StatusCode != http.StatusOK {
		var e errorAnswer
		msg := strings.TrimSpace(string(raw))
		if json.Unmarshal(raw, &e) == nil && e.Error != "" {
			msg = e.Error
		}
		return nil, nil, fmt.Errorf("%s answered %s: %s", c.addr, resp.Status, msg)
	}
	var ans Answer
	if err := json.Unmarshal(raw, &ans); err != nil {
		return nil, nil, fmt.Errorf("%s answered what is not a counters answer (is it the debug listener?): %w", c.addr, err)
	}
	return &ans, raw, nil
}

// printAnswer writes the answer for people: the descriptor and what
// applies, then one row per limit.
func printAnswer(w io.Writer, a *Answer) {
	fmt.Fprintf(w, "%s %s: %s\n", a.Domain, descriptorText(a.Descriptor, " "), a.Reason)
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
		fmt.Fprintln(tw, strings.Join(row(c, a.Reset), "\t"))
	}
	tw.Flush()
}

// row is the table's row for c, with the BEFORE column after a reset.
func row(c Counter, reset bool) []string {
	cells := []string{c.Rule, c.Limit, c.Mode, "-", "-", "-"}
	if c.Counted {
		cells[3] = fmt.Sprintf("%d/%d", c.Used, c.Capacity)
		cells[4] = strconv.FormatInt(c.Remaining, 10)
		cells[5] = resetIn(c.ResetSeconds)
	}
	if reset {
		before := "-"
		if c.UsedBefore != nil {
			before = strconv.FormatInt(*c.UsedBefore, 10)
		}
		cells = append(cells, before)
	}
	if c.Counted {
		return append(cells, strconv.Quote(c.Key))
	}
	return append(cells, c.Note)
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
