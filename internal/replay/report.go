package replay

import (
	"bufio"
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
	// Skipped, Truncated and Reordered sum the inputs' InputStats.
	Skipped   int `json:"skipped"`
	Truncated int `json:"truncated"`
	Reordered int `json:"reordered"`
	// Traffic are the counts of each input, in the order given to Merge.
	Traffic []InputStats `json:"traffic"`
	// From and To are the times of the first and last requests.
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
	// Old and New are the totals of each rule set.
	Old *SetStats `json:"old"`
	New *SetStats `json:"new"`
	// Domains are the requests' decisions per domain, by name.
	Domains []DomainCount `json:"domains"`
	// Rules are the requests that met each rule of either set, by domain
	// and rule path; Old or New is null for a rule only the other set has.
	Rules []RuleDiff `json:"rules"`
	// Changed are the requests whose decision differs between the sets.
	Changed Changed `json:"changed"`
	// Values are the descriptor values with a denial under either set,
	// most changed first (by the size of NewDenied - OldDenied, then by
	// NewDenied), up to Options.Values of them; ValuesDenied is how many
	// there were in all.
	Values       []ValueChange `json:"values"`
	ValuesDenied int           `json:"values_denied"`
	// Counters is the number of distinct counters (domain and descriptor
	// entries) seen; Peaks are the busiest, by peak requests per second;
	// UntrackedCounters counts descriptors beyond the first million
	// counters, in neither Peaks nor Values.
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

// RuleCount is what became, under one set, of the requests with a
// descriptor that matched a rule, counted once per request. Allowed and
// Denied are the requests' answers, whichever rule decided them. Refused
// counts the requests denied while this rule's descriptor was over its
// limit; WouldRefuse, for a rule in shadow mode, those in which it was
// over its limit. A request refused as invalid counts on no rule.
type RuleCount struct {
	Pos         string `json:"pos"`
	Shadow      bool   `json:"shadow_mode,omitempty"`
	Requests    int    `json:"requests"`
	Allowed     int    `json:"allowed"`
	Denied      int    `json:"denied"`
	Refused     int    `json:"refused"`
	WouldRefuse int    `json:"would_refuse"`
}

func (c *RuleCount) add(denied, over bool) {
	c.Requests++
	if denied {
		c.Denied++
	} else {
		c.Allowed++
	}
	switch {
	case over && c.Shadow:
		c.WouldRefuse++
	case over && denied:
		c.Refused++
	}
}

// RuleDiff is one rule under each set, and the requests whose answer this
// rule changed: NowDenied were allowed under the old set and are denied
// under the new one with this rule over its limit; NowAllowed the other
// way round. A changed request counts on every rule that refused it, so
// on at least one.
type RuleDiff struct {
	Domain     string     `json:"domain"`
	Rule       string     `json:"rule"`
	Old        *RuleCount `json:"old"`
	New        *RuleCount `json:"new"`
	NowDenied  int        `json:"now_denied"`
	NowAllowed int        `json:"now_allowed"`
}

// ruleName is a rule's path with its mode when not enforced under both
// sets: "(shadow)", or its change, "(shadow -> enforced)".
func ruleName(r RuleDiff) string {
	shadow := func(c *RuleCount) bool { return c != nil && c.Shadow }
	word := map[bool]string{false: "enforced", true: "shadow"}
	switch o, n := shadow(r.Old), shadow(r.New); {
	case r.Old != nil && r.New != nil && o != n:
		return r.Rule + " (" + word[o] + " -> " + word[n] + ")"
	case o || n:
		return r.Rule + " (shadow)"
	}
	return r.Rule
}

// cells are the rule's REQUESTS, DENIED and REFUSED under each set, as
// "31 -> 91", or one figure when they are equal. "-" stands for a set
// without the rule, "would 60" for a rule in shadow mode over its limit.
func (r RuleDiff) cells() []string {
	figures := func(c *RuleCount) []string {
		if c == nil {
			return []string{"-", "-", "-"}
		}
		refused := fmt.Sprint(c.Refused)
		if c.Shadow && c.WouldRefuse > 0 {
			refused = fmt.Sprintf("would %d", c.WouldRefuse)
		}
		return []string{fmt.Sprint(c.Requests), fmt.Sprint(c.Denied), refused}
	}
	o, n := figures(r.Old), figures(r.New)
	for i := range o {
		if o[i] != n[i] {
			o[i] += " -> " + n[i]
		}
	}
	return o
}

// Changed counts the requests whose decision differs, with the first few.
type Changed struct {
	Total      int       `json:"total"`
	NowDenied  int       `json:"now_denied"`
	NowAllowed int       `json:"now_allowed"`
	Other      int       `json:"other,omitempty"` // to or from invalid
	Examples   []Example `json:"examples"`
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

// ValueChange is what the edit does to the requests carrying one
// descriptor value (an address, an API key: what names the client). A
// request counts under each of its descriptors; OldDenied and NewDenied
// are those denied under each set, by whichever rule.
type ValueChange struct {
	Domain     string `json:"domain"`
	Descriptor string `json:"descriptor"`
	Requests   int64  `json:"requests"`
	OldDenied  int64  `json:"old_denied"`
	NewDenied  int64  `json:"new_denied"`
	// Change is NewDenied - OldDenied.
	Change int64 `json:"change"`
	// OldRule and NewRule are the rules the descriptor meets in each set.
	OldRule string `json:"old_rule"`
	NewRule string `json:"new_rule"`
}

// share renders n of a value's requests: "385 (32%)".
func (v ValueChange) share(n int64) string {
	switch p := (n*100 + v.Requests/2) / max(v.Requests, 1); {
	case n == 0:
		return "0"
	case p == 0:
		return fmt.Sprintf("%d (<1%%)", n)
	case p == 100 && n < v.Requests:
		return fmt.Sprintf("%d (>99%%)", n)
	default:
		return fmt.Sprintf("%d (%d%%)", n, p)
	}
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
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "%s\n", rep.summary())
	if len(rep.Traffic) > 1 {
		fmt.Fprintf(bw, "traffic: %s\n", rep.inputs())
	}
	fmt.Fprintf(bw, "old: %s\nnew: %s\n\n", rep.Old.Name, rep.New.Name)

	tw := tabwriter.NewWriter(bw, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "DOMAIN\tOLD ALLOWED\tOLD DENIED\tNEW ALLOWED\tNEW DENIED\tCHANGE\t\n")
	for _, d := range rep.Domains {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%s\t\n", d.Domain, d.Old.Allowed, d.Old.Denied, d.New.Allowed, d.New.Denied, delta(d.Old.Denied, d.New.Denied))
	}
	fmt.Fprintf(tw, "(all)\t%d\t%d\t%d\t%d\t%s\t\n", rep.Old.Allowed, rep.Old.Denied, rep.New.Allowed, rep.New.Denied, delta(rep.Old.Denied, rep.New.Denied))
	tw.Flush()
	if rep.Old.Invalid+rep.New.Invalid > 0 {
		fmt.Fprintf(bw, "refused as invalid: %d old, %d new\n", rep.Old.Invalid, rep.New.Invalid)
	}
	rep.writeRules(bw)

	fmt.Fprintf(bw, "\nDecisions changed: %d (%d now denied, %d now allowed", rep.Changed.Total, rep.Changed.NowDenied, rep.Changed.NowAllowed)
	if rep.Changed.Other > 0 {
		fmt.Fprintf(bw, ", %d to or from invalid", rep.Changed.Other)
	}
	fmt.Fprintf(bw, ")\n")
	for _, e := range rep.Changed.Examples {
		fmt.Fprintf(bw, "  %s %s %s: %s -> %s%s\n", stamp(e.Time), e.Domain, e.Descriptors, e.Old, e.New, exampleWhy(e))
	}
	rep.writeValues(bw)

	fmt.Fprintf(bw, "\nBusiest counters (%d seen; requests offered):\n", rep.Counters)
	tw = tabwriter.NewWriter(bw, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "DOMAIN\tDESCRIPTOR\tREQUESTS\tPEAK/S\tAT\tPEAK/MIN\tOLD RULE\tNEW RULE\n")
	for _, p := range rep.Peaks {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%d\t%s\t%s\n", p.Domain, p.Descriptor, p.Requests, p.PeakPerSecond, stamp(p.PeakSecond),
			p.PeakPerMinute, orNone(p.OldRule), orNone(p.NewRule))
	}
	tw.Flush()
	if rep.UntrackedCounters > 0 {
		fmt.Fprintf(bw, "(%d descriptors beyond the first %d counters not tracked)\n", rep.UntrackedCounters, maxCounters)
	}
	return bw.Flush()
}

// Legends of the tables, the same in text and HTML.
const (
	rulesLegend = `DENIED: denied, by this rule or another. REFUSED: denied with this rule over its limit;
"would N": over its limit in shadow mode, so let through. NOW DENIED: allowed by the old
rules, denied by the new with this rule over its limit. NOW ALLOWED: denied by the old rules
with this rule over its limit, allowed by the new.`
	valuesLegend = `A request counts under each of its descriptors. DENIED: denied, by any rule (the share
of the value's requests).`
)

// writeRules writes the table per rule.
func (rep *Report) writeRules(bw *bufio.Writer) {
	active, idle := rep.activeRules()
	fmt.Fprintf(bw, "\nPer rule: the requests with a descriptor that matched it, old -> new where they differ.\n%s\n", rulesLegend)
	tw := tabwriter.NewWriter(bw, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "RULE\tREQUESTS\tDENIED\tREFUSED\tNOW DENIED\tNOW ALLOWED\t\n")
	for _, r := range active {
		c := r.cells()
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t\n", ruleName(r), c[0], c[1], c[2], r.NowDenied, r.NowAllowed)
	}
	tw.Flush()
	if idle > 0 {
		fmt.Fprintf(bw, "(%s without traffic not shown)\n", plural(idle, "rule"))
	}
}

// writeValues writes the table of descriptor values by change.
func (rep *Report) writeValues(bw *bufio.Writer) {
	if rep.ValuesDenied == 0 {
		fmt.Fprintf(bw, "\nNo descriptor value has a request denied under either rule set.\n")
		return
	}
	fmt.Fprintf(bw, "\nDescriptor values by change in denials (%s with a request denied).\n%s\n", rep.valuesShown(), valuesLegend)
	tw := tabwriter.NewWriter(bw, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "DOMAIN\tDESCRIPTOR\tREQUESTS\tOLD DENIED\tNEW DENIED\tCHANGE\n")
	for _, v := range rep.Values {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\n", v.Domain, v.Descriptor, v.Requests, v.share(v.OldDenied), v.share(v.NewDenied), signed(v.Change))
	}
	tw.Flush()
}

// valuesShown says which values the table lists: "the 3 values", "the top
// 20 of 153 values".
func (rep *Report) valuesShown() string {
	if len(rep.Values) < rep.ValuesDenied {
		return fmt.Sprintf("the top %d of %d values", len(rep.Values), rep.ValuesDenied)
	}
	return "the " + plural(rep.ValuesDenied, "value")
}

// inputs lists the inputs with their requests.
func (rep *Report) inputs() string {
	parts := make([]string, len(rep.Traffic))
	for i, in := range rep.Traffic {
		parts[i] = fmt.Sprintf("%s (%s)", in.Name, plural(in.Requests, "request"))
	}
	return strings.Join(parts, ", ")
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
	switch {
	case rep.Truncated == 1:
		b.WriteString("; an incomplete last line skipped")
	case rep.Truncated > 1:
		fmt.Fprintf(&b, "; %d incomplete last lines skipped", rep.Truncated)
	}
	if rep.Reordered > 0 {
		fmt.Fprintf(&b, "; %s out of time order put back in order", plural(rep.Reordered, "request"))
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

// activeRules returns the rules some request met under either set, and
// the number of the others.
func (rep *Report) activeRules() ([]RuleDiff, int) {
	var active []RuleDiff
	for _, r := range rep.Rules {
		if r.Old != nil && r.Old.Requests > 0 || r.New != nil && r.New.Requests > 0 {
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

// delta renders the change from old to new denials: "+60 denied", or "=".
func delta(old, new int) string {
	if old == new {
		return "="
	}
	return fmt.Sprintf("%+d denied", new-old)
}

// signed renders a change: "+60", "-6", or "=".
func signed(n int64) string {
	if n == 0 {
		return "="
	}
	return fmt.Sprintf("%+d", n)
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
