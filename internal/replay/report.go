package replay

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// Report is the outcome of a replay. Its JSON form (WriteJSON) is the
// machine-readable report; WriteText and WriteHTML render it for people.
type Report struct {
	// Requests is the number of requests replayed.
	Requests int `json:"requests"`
	// Skipped counts access-log lines without rate-limit metadata (requests
	// Envoy did not ask floodgate about).
	Skipped int `json:"skipped"`
	// Truncated counts incomplete last lines skipped (0 or 1): the
	// traffic file was copied while it was being written.
	Truncated int `json:"truncated"`
	// OutOfOrder counts requests older than one replayed before them,
	// decided at that later time.
	OutOfOrder int `json:"out_of_order"`
	// From and To are the times of the first and last requests.
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
	// Old and New are the totals of each rule set.
	Old *SetStats `json:"old"`
	New *SetStats `json:"new"`
	// Domains are the requests' decisions per domain, by name.
	Domains []DomainCount `json:"domains"`
	// Rules are the descriptors' decisions per rule of either set, by
	// domain and rule path; Old or New is null for a rule only the other
	// set has.
	Rules []RuleDiff `json:"rules"`
	// Changed are the requests whose decision differs between the sets.
	Changed Changed `json:"changed"`
	// Counters is the number of distinct counters (domain and descriptor
	// entries) seen; Peaks are the busiest of them, by peak requests per
	// second; UntrackedCounters counts descriptors not tracked beyond the
	// first million counters.
	Counters          int           `json:"counters"`
	UntrackedCounters int           `json:"untracked_counters,omitempty"`
	Peaks             []CounterPeak `json:"peaks"`
	// Minutes are the denials per minute under each set, for each minute
	// with a denial, in time order.
	Minutes []MinuteCount `json:"minutes"`
}

// SetStats are the totals of one rule set: requests whose overall answer
// was OK (Allowed) or OVER_LIMIT (Denied), and those the service refused
// as invalid (an invalid limit override, a request beyond its bounds).
type SetStats struct {
	Name    string `json:"name"`
	Allowed int    `json:"allowed"`
	Denied  int    `json:"denied"`
	Invalid int    `json:"invalid"`
}

// Counts are requests allowed, denied and refused as invalid.
type Counts struct {
	Allowed int `json:"allowed"`
	Denied  int `json:"denied"`
	Invalid int `json:"invalid,omitempty"`
}

func (c *Counts) add(d decision) {
	switch d {
	case allowed:
		c.Allowed++
	case denied:
		c.Denied++
	default:
		c.Invalid++
	}
}

// DomainCount is one domain's requests under each set.
type DomainCount struct {
	Domain string `json:"domain"`
	Old    Counts `json:"old"`
	New    Counts `json:"new"`
}

// RuleCount is what one rule of one set answered: descriptors that matched
// it and were within their limits (Allowed) or over one (Denied, which a
// rule in shadow mode reports without refusing the request).
type RuleCount struct {
	Domain  string `json:"-"`
	Rule    string `json:"-"`
	Pos     string `json:"pos"`
	Shadow  bool   `json:"shadow_mode,omitempty"`
	Allowed int    `json:"allowed"`
	Denied  int    `json:"denied"`
}

// RuleDiff is one rule under each set.
type RuleDiff struct {
	Domain string     `json:"domain"`
	Rule   string     `json:"rule"`
	Old    *RuleCount `json:"old"`
	New    *RuleCount `json:"new"`
}

// Changed counts the requests whose decision differs, with the first few.
type Changed struct {
	Total      int       `json:"total"`
	NowDenied  int       `json:"now_denied"`
	NowAllowed int       `json:"now_allowed"`
	Other      int       `json:"other,omitempty"` // to or from invalid
	Examples   []Example `json:"examples"`
}

func (c *Changed) add(a, b outcome) {
	c.Total++
	switch {
	case a.code == allowed && b.code == denied:
		c.NowDenied++
	case a.code == denied && b.code == allowed:
		c.NowAllowed++
	default:
		c.Other++
	}
}

// Example is one request whose decision changed.
type Example struct {
	Time        time.Time `json:"time"`
	Domain      string    `json:"domain"`
	Descriptors string    `json:"descriptors"`
	Old         string    `json:"old"`
	New         string    `json:"new"`
	// OldRule and NewRule name the rule of the first descriptor over its
	// limit, when denied.
	OldRule string `json:"old_rule,omitempty"`
	NewRule string `json:"new_rule,omitempty"`
	// Error is the service's message for an invalid request.
	Error string `json:"error,omitempty"`
}

// CounterPeak is one counter's traffic: a domain and a descriptor's
// entries, the rule it meets in each set, and its busiest second and
// minute (calendar-aligned, in requests offered, whatever was decided).
type CounterPeak struct {
	Domain        string    `json:"domain"`
	Descriptor    string    `json:"descriptor"`
	OldRule       string    `json:"old_rule"`
	NewRule       string    `json:"new_rule"`
	Requests      int64     `json:"requests"`
	PeakPerSecond int64     `json:"peak_per_second"`
	PeakSecond    time.Time `json:"peak_second"`
	PeakPerMinute int64     `json:"peak_per_minute"`
}

// MinuteCount is the denials of one minute under each set.
type MinuteCount struct {
	Minute    time.Time `json:"minute"`
	OldDenied int       `json:"old_denied"`
	NewDenied int       `json:"new_denied"`
}

// WriteJSON writes the report as indented JSON.
func (rep *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

// WriteText writes the report as tables for a terminal.
func (rep *Report) WriteText(w io.Writer) error {
	ew := &errWriter{w: w}
	ew.printf("%s", rep.summary())
	if rep.OutOfOrder > 0 {
		ew.printf(", decided at the latest time seen")
	}
	ew.printf("\nold: %s\nnew: %s\n\n", rep.Old.Name, rep.New.Name)

	tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "DOMAIN\tOLD ALLOWED\tOLD DENIED\tNEW ALLOWED\tNEW DENIED\tCHANGE\t\n")
	for _, d := range rep.Domains {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%s\t\n", d.Domain, d.Old.Allowed, d.Old.Denied, d.New.Allowed, d.New.Denied, delta(d.New.Denied-d.Old.Denied))
	}
	fmt.Fprintf(tw, "(all)\t%d\t%d\t%d\t%d\t%s\t\n", rep.Old.Allowed, rep.Old.Denied, rep.New.Allowed, rep.New.Denied, delta(rep.New.Denied-rep.Old.Denied))
	tw.Flush()
	if rep.Old.Invalid+rep.New.Invalid > 0 {
		ew.printf("refused as invalid: %d old, %d new\n", rep.Old.Invalid, rep.New.Invalid)
	}

	active, idle := rep.activeRules()
	ew.printf("\nPer rule (descriptors within / over their limits; %s without traffic not shown):\n", plural(idle, "rule"))
	tw = tabwriter.NewWriter(ew, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "RULE\tOLD ALLOWED\tOLD DENIED\tNEW ALLOWED\tNEW DENIED\tCHANGE\t\n")
	for _, r := range active {
		name := r.Rule
		if r.Old != nil && r.Old.Shadow || r.New != nil && r.New.Shadow {
			name += " (shadow)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t\n", name, ruleField(r.Old, false), ruleField(r.Old, true),
			ruleField(r.New, false), ruleField(r.New, true), delta(denials(r.New)-denials(r.Old)))
	}
	tw.Flush()

	ew.printf("\nDecisions changed: %d (%d now denied, %d now allowed", rep.Changed.Total, rep.Changed.NowDenied, rep.Changed.NowAllowed)
	if rep.Changed.Other > 0 {
		ew.printf(", %d to or from invalid", rep.Changed.Other)
	}
	ew.printf(")\n")
	for _, e := range rep.Changed.Examples {
		ew.printf("  %s %s %s: %s -> %s%s\n", stamp(e.Time), e.Domain, e.Descriptors, e.Old, e.New, exampleWhy(e))
	}

	ew.printf("\nBusiest counters (%d seen; requests offered):\n", rep.Counters)
	tw = tabwriter.NewWriter(ew, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "DOMAIN\tDESCRIPTOR\tREQUESTS\tPEAK/S\tAT\tPEAK/MIN\tOLD RULE\tNEW RULE\n")
	for _, p := range rep.Peaks {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%d\t%s\t%s\n", p.Domain, p.Descriptor, p.Requests, p.PeakPerSecond, stamp(p.PeakSecond),
			p.PeakPerMinute, orNone(p.OldRule), orNone(p.NewRule))
	}
	tw.Flush()
	if rep.UntrackedCounters > 0 {
		ew.printf("(%d descriptors beyond the first %d counters not tracked)\n", rep.UntrackedCounters, maxCounters)
	}
	return ew.err
}

// summary is the report's first line: how much traffic was replayed.
func (rep *Report) summary() string {
	var b strings.Builder
	if rep.Requests == 0 {
		b.WriteString("No request replayed: the traffic holds none")
	} else {
		fmt.Fprintf(&b, "Replayed %s from %s to %s (%s of traffic)", plural(rep.Requests, "request"),
			stamp(rep.From), stamp(rep.To), rep.To.Sub(rep.From).Round(time.Second))
	}
	if rep.Skipped > 0 {
		fmt.Fprintf(&b, "; %s without rate-limit metadata skipped", plural(rep.Skipped, "access-log line"))
	}
	if rep.Truncated > 0 {
		b.WriteString("; an incomplete last line skipped")
	}
	if rep.OutOfOrder > 0 {
		fmt.Fprintf(&b, "; %s out of time order", plural(rep.OutOfOrder, "request"))
	}
	return b.String()
}

// plural returns n and noun, with an s unless n is 1.
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// activeRules returns the rules some descriptor matched under either set,
// and the number of the others.
func (rep *Report) activeRules() ([]RuleDiff, int) {
	var active []RuleDiff
	for _, r := range rep.Rules {
		if r.Old != nil && r.Old.Allowed+r.Old.Denied > 0 || r.New != nil && r.New.Allowed+r.New.Denied > 0 {
			active = append(active, r)
		}
	}
	return active, len(rep.Rules) - len(active)
}

func exampleWhy(e Example) string {
	switch {
	case e.Error != "":
		return " (" + e.Error + ")"
	case e.NewRule != "":
		return " (over " + e.NewRule + ")"
	case e.OldRule != "":
		return " (was over " + e.OldRule + ")"
	}
	return ""
}

func ruleField(c *RuleCount, deniedCol bool) string {
	if c == nil {
		return "-"
	}
	if deniedCol {
		return fmt.Sprint(c.Denied)
	}
	return fmt.Sprint(c.Allowed)
}

func denials(c *RuleCount) int {
	if c == nil {
		return 0
	}
	return c.Denied
}

func delta(n int) string {
	if n == 0 {
		return "="
	}
	return fmt.Sprintf("%+d denied", n)
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// errWriter keeps the first write error, so the writers check it once.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(p)
	e.err = err
	return n, err
}

func (e *errWriter) printf(format string, args ...any) { fmt.Fprintf(e, format, args...) }
